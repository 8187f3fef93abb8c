"""One replica of a service with an endpoint (``serve.endpoint``): it answers the real
requests its clients sent to the API's ingress, instead of a stream it generates itself
(:class:`workers.serve_run.ServeRun`, whose figures and reports it shares).

The replica is *ready* (offered requests) only once its model is loaded and has run a forward
pass at every batch size its batcher may send: a scale-up's new replica takes no traffic before
it can answer it at speed. Requests come from :class:`RequestQueue` (the orchestrator's
``orchestrator.store.ingress.ReplicaQueue``, given to the trusted worker with the run; this
module names it by its shape, as the data plane does not import the control plane). A batch
leaves when it holds ``micro_batch`` requests or its first request has waited
``serve.max_delay_s`` since it reached the ingress. On a stop (a scale-down, a cancel) the
replica leaves the ready set first, then answers what it took: a drain, with no request lost.

Each answer is the model's output for its sample, with its timing (queue, batch, model). An
output of more than :data:`MAX_OUTPUT_VALUES` values (a language model's logits over its
vocabulary at every position) is answered as its arg-max over the last dimension at the last
position: the next token.
"""

from __future__ import annotations

import base64
import time
from typing import Any, Protocol

import torch

from workers.devices import to_device
from workers.errors import HarnessConfigError
from workers.result import RunResult
from workers.serve_run import LOAD_WINDOW_S, Replica, ServeRun, _sync

__all__ = ["MAX_OUTPUT_VALUES", "EndpointServe", "RequestQueue"]

MAX_OUTPUT_VALUES = 4096
HEARTBEAT_S = 1.0
TAKE_BLOCK_S = 0.1
"""How long one wait for requests blocks: a stop is seen within it."""
_DTYPES = {"float32": torch.float32, "int64": torch.int64}


class RequestQueue(Protocol):
    """Where a replica takes its requests and sends their answers (see the module doc)."""

    def join(self, name: str, facts: dict[str, Any]) -> None: ...
    def heartbeat(self) -> None: ...
    def leave(self) -> None: ...
    def take(self, max_n: int, block_s: float) -> list[Any]: ...
    def answer(self, answers: Any) -> None: ...
    def offered_rps(self, window_s: float) -> float | None: ...
    def close(self) -> None: ...


def sample_facts(model: torch.nn.Module, x: torch.Tensor) -> dict[str, Any]:
    """One request's input as the ingress checks it: a sample's shape and dtype, and for
    token ids the vocabulary's size (its first embedding's rows)."""
    dtype = "int64" if x.dtype in (torch.int64, torch.int32) else "float32"
    high = None
    if dtype == "int64":
        emb = next((m for m in model.modules() if isinstance(m, torch.nn.Embedding)), None)
        high = None if emb is None else int(emb.num_embeddings)
    return {"shape": list(x.shape[1:]), "dtype": dtype, "high": high}


def decode(payload: dict[str, Any], facts: dict[str, Any]) -> torch.Tensor:
    """A request's sample as a tensor of the model's input dtype (shape checked again: the
    ingress checked it against the replica that was ready then).

    Raises:
        ValueError: it does not fit.
    """
    dtype = _DTYPES[str(facts["dtype"])]
    shape = [int(n) for n in facts["shape"]]
    if "raw" in payload:
        data = bytearray(base64.b64decode(payload["raw"]))
        t = torch.frombuffer(data, dtype=dtype)
    else:
        t = torch.tensor(payload["input"], dtype=dtype)
    if t.numel() != int(torch.Size(shape).numel()):
        raise ValueError(f"input: {t.numel()} values, expected shape {shape}")
    return t.reshape(shape)


def answer_of(out: torch.Tensor) -> Any:
    """One sample's output as JSON (see the module doc)."""
    out = out.detach().float().cpu()
    if out.numel() > MAX_OUTPUT_VALUES:
        last = out.reshape(-1, out.shape[-1])[-1] if out.dim() > 1 else out
        return {"next_token": int(last.argmax().item())}
    return out.tolist()


class EndpointServe(ServeRun):
    """A replica answering its endpoint's requests on the wall clock until the service's
    ``duration_s`` (from its start), a stop, or a lost fence.

    Args:
        h: the harness that built it.
        requests: the service's request queue (``None``: the run was started without one,
            which is refused).
    """

    def __init__(self, h: Replica, requests: RequestQueue | None) -> None:
        if requests is None:
            raise HarnessConfigError(
                "serve.endpoint: this run has no request queue (a service with an endpoint "
                "runs on the pool, whose worker hands it the queue)"
            )
        super().__init__(h)
        self.requests = requests
        self.facts: dict[str, Any] = {}

    def execute(self) -> RunResult:
        """Serve the endpoint's requests (see the class doc)."""
        h = self.h
        self.peak.reset()
        model = (h.model if self.quant_error is None else self.model).eval()
        mb = h.config.micro_batch
        x0, _ = h.workload.make_batch(0, 1)
        self.facts = sample_facts(model, x0)
        warm = {n: to_device(h.workload.make_batch(0, n), h.device) for n in range(1, mb + 1)}
        for n in range(1, mb + 1):  # a first batch at every size before taking traffic
            with torch.inference_mode(), h._autocast():
                h.workload.loss(model, warm[n])
        _sync(h.device)
        del warm
        name = f"r{h.rank}-{time.time_ns() % 10**12}"
        self.requests.join(name, {"input": self.facts, "max_batch": mb})
        self.started = time.perf_counter()
        self.start_at = time.time()
        status = "finished"
        beat = time.monotonic()
        try:
            while True:
                if not h._fence():
                    status = "fenced"
                    break
                if h._should_stop():
                    status = "stopped"
                    break
                if self.duration_s and time.perf_counter() - self.started >= self.duration_s:
                    break
                if time.monotonic() - beat >= HEARTBEAT_S:
                    self.requests.heartbeat()
                    beat = time.monotonic()
                batch = self._gather(mb)
                if batch:
                    self._answer(model, batch)
                if time.perf_counter() - self.last_report >= h._report_every_s:
                    self._emit("running")
        finally:
            self.requests.leave()  # no request is routed here from now on
        # a drain: whatever this replica took is answered above, batch by batch; requests it
        # never took stay in the stream for the replicas that stay
        self.requests.close()
        if status != "fenced":
            self._emit(status)
        return self._result(status)

    def _gather(self, mb: int) -> list[Any]:
        """Up to ``mb`` requests: the first within :data:`TAKE_BLOCK_S`, then more until the
        batch is full or its first request has waited ``max_delay_s`` since it arrived."""
        got = list(self.requests.take(mb, TAKE_BLOCK_S))
        if not got or self.max_delay_s is None:
            return got
        leaves_at = got[0].arrived_at + float(self.max_delay_s)
        while len(got) < mb:
            left = leaves_at - time.time()
            if left <= 0.0005:
                break
            got += self.requests.take(mb - len(got), left)
        return got

    def _answer(self, model: torch.nn.Module, batch: list[Any]) -> None:
        """One forward pass for ``batch``; each request answered with its output and timing
        (a request whose input does not fit is answered with its error alone)."""
        h = self.h
        answers: list[tuple[Any, dict[str, Any]]] = []
        good, xs = [], []
        for req in batch:
            try:
                xs.append(decode(req.payload, self.facts))
                good.append(req)
            except (ValueError, KeyError, TypeError, RuntimeError) as err:
                answers.append((req, {"error": f"{type(err).__name__}: {err}"}))
        if good:
            began = time.time()
            x = to_device(torch.stack(xs), h.device)
            _sync(h.device)
            t0 = time.perf_counter()
            try:
                with torch.inference_mode(), h._autocast():
                    out = model(x)
                _sync(h.device)
            except Exception as err:  # the model failed on these inputs: each is told
                answers += [(r, {"error": f"{type(err).__name__}: {err}"}) for r in good]
                good = []
            took = time.perf_counter() - t0
            done = time.time()
            for i, req in enumerate(good):
                answers.append(
                    (
                        req,
                        {
                            "output": answer_of(out[i]),
                            "timing": {
                                "queue_ms": max(0.0, began - req.arrived_at) * 1000.0,
                                "model_ms": took * 1000.0,
                                "batch": len(good),
                                "replica": self.requests_name(),
                            },
                        },
                    )
                )
                self.latency.add((done - req.arrived_at) * 1000.0)
                self.queue.add(max(0.0, began - req.arrived_at) * 1000.0)
                self.recent.add(time.perf_counter(), done - req.arrived_at, 1)
            now = time.perf_counter()
            self.batch_log.append((now, took, len(good)))
            while self.batch_log and self.batch_log[0][0] < now - LOAD_WINDOW_S:
                self.batch_log.popleft()
            self.served += len(good)
            self.batches += 1
            self.batched += len(good)
            if self.first_step_at is None:
                self.first_step_at = time.time()
        self.requests.answer(answers)

    def requests_name(self) -> str:
        """This replica's name at the ingress."""
        return str(getattr(self.requests, "name", ""))

    def _load(self, now: float, elapsed: float) -> dict[str, float | None]:
        """As :meth:`ServeRun._load`, with the offered load read at the ingress (every
        replica's requests, not a generated stream's)."""
        span = min(LOAD_WINDOW_S, elapsed)
        if span <= 0:
            return {"window_offered_rps": None, "window_served_rps": None, "window_busy": None}
        recent = [b for b in self.batch_log if b[0] >= now - span]
        try:
            offered = self.requests.offered_rps(LOAD_WINDOW_S)
        except Exception:  # the store briefly unreachable: the figure is missing, not wrong
            offered = None
        return {
            "window_offered_rps": offered,
            "window_served_rps": sum(b[2] for b in recent) * self.h.world_size / span,
            "window_busy": min(1.0, sum(b[1] for b in recent) / span),
        }
