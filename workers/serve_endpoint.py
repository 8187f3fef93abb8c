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
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from workers.devices import to_device
from workers.errors import HarnessConfigError
from workers.result import RunResult
from workers.serve_run import LOAD_WINDOW_S, Replica, ServeRun, _sync

__all__ = [
    "MAX_OUTPUT_VALUES",
    "EndpointServe",
    "PipedRequests",
    "RequestPump",
    "RequestQueue",
    "clean_answer",
    "clean_facts",
]

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
    def requeue(self, requests: list[Any]) -> None: ...
    def load(self, window_s: float) -> tuple[float | None, float | None]: ...
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
    ``duration_s`` (from the service's start: ``serve.start_at``, else this replica's), a
    stop, or a lost fence. Each replica is a world of one (its runtime adds and drains
    replicas while the others serve: ``orchestrator.runtime.service_run``), so the load it
    reports, offered and served, is read at the ingress, for the whole service.

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
        self.paired = True

    def execute(self) -> RunResult:
        """Serve the endpoint's requests (see the class doc)."""
        h = self.h
        self.peak.reset()
        model = (h.model if self.quant_error is None else self.model).eval()
        mb = h.config.micro_batch
        first = h.workload.make_batch(0, 1)
        # a batch is the inputs alone (a team's model, as examples/own_model's) or an
        # (inputs, targets) pair (the built-in workloads): requests are batched the same way
        self.paired = isinstance(first, tuple | list)
        self.facts = sample_facts(model, first[0] if self.paired else first)
        warm = {n: to_device(h.workload.make_batch(0, n), h.device) for n in range(1, mb + 1)}
        for n in range(1, mb + 1):  # a first batch at every size before taking traffic
            with torch.inference_mode(), h._autocast():
                h.workload.loss(model, warm[n])
        _sync(h.device)
        del warm
        name = f"r{h.rank}-{time.time_ns() % 10**12}"
        if self.start_at is None:
            self.start_at = time.time()
        # when the service stops serving (its clients may stop sending then): its start
        # (stamped at launch, before this replica loaded its model) plus its duration
        ends_at = self.start_at + self.duration_s if self.duration_s else None
        self.requests.join(name, {"input": self.facts, "max_batch": mb, "ends_at": ends_at})
        self.started = time.perf_counter()
        # a replica added while the service serves (a scale-up) ends with the others: the
        # service's duration counts from its start (serve.start_at, set by its runtime)
        self.offset = min(self.duration_s, max(0.0, time.time() - self.start_at))
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
                if self.duration_s and time.perf_counter() - self.started >= (
                    self.duration_s - self.offset
                ):
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
                    # the workload's own forward (a forward-only workload's loss is its
                    # output): a team's model may wrap it
                    out = h.workload.loss(model, (x, None) if self.paired else x)
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
        """As :meth:`ServeRun._load`, with the offered and served load read at the ingress
        (every replica's requests and answers: each replica is a world of one, which sees
        only its own batches); the busy share is this replica's."""
        span = min(LOAD_WINDOW_S, elapsed)
        if span <= 0:
            return {"window_offered_rps": None, "window_served_rps": None, "window_busy": None}
        recent = [b for b in self.batch_log if b[0] >= now - span]
        try:
            offered, served = self.requests.load(LOAD_WINDOW_S)
        except Exception:  # the store briefly unreachable: the figures are missing, not wrong
            offered = served = None
        return {
            "window_offered_rps": offered,
            "window_served_rps": served,
            "window_busy": min(1.0, sum(b[1] for b in recent) / span),
        }

    def _figures(self) -> dict[str, Any]:
        """As :meth:`ServeRun._figures`, with this replica's own answers per second as its
        window rate (the served load above is every replica's)."""
        figures = super()._figures()
        now = time.perf_counter()
        span = min(LOAD_WINDOW_S, now - self.started)
        own = sum(b[2] for b in self.batch_log if b[0] >= now - span)
        figures["window_samples_per_s"] = own / span if span > 0 else None
        return figures


# -- a team's model: the sandboxed child serves, the trusted worker holds the queue ------------


@dataclass(frozen=True)
class Taken:
    """A request as the sandboxed child takes it (what the worker sent it of the request)."""

    entry: str
    arrived_at: float
    payload: dict[str, Any]


class PipedRequests:
    """The child's :class:`RequestQueue`: the worker (:class:`RequestPump`) sends it requests
    on its stdin; it says its answers, readiness and drain on its message pipe (``say``). It
    never reaches the store: the child has no network and no credential.

    Args:
        say: writes one message to the worker.
    """

    def __init__(self, say: Callable[[dict[str, Any]], None]) -> None:
        self.say = say
        self.name = ""
        self._waiting: deque[Taken] = deque()
        self._ready = threading.Condition()
        self._load: tuple[float | None, float | None] = (None, None)

    def feed(self, message: dict[str, Any]) -> None:
        """A message from the worker: requests to serve, or the offered and served load."""
        if "load" in message:
            got = message["load"] if isinstance(message["load"], list) else []
            offered, served = [*got, None, None][:2]
            self._load = (_rate(offered), _rate(served))
        taken = []
        for r in message.get("requests") or ():
            with contextlib.suppress(KeyError, TypeError, ValueError):
                taken.append(Taken(str(r["entry"]), float(r["arrived_at"]), dict(r["payload"])))
        if taken:
            with self._ready:
                self._waiting.extend(taken)
                self._ready.notify_all()

    def join(self, name: str, facts: dict[str, Any]) -> None:
        self.name = name
        self.say({"join": {"name": name, "facts": facts}})

    def heartbeat(self) -> None:
        self.say({"heartbeat": True})

    def leave(self) -> None:
        self.say({"leave": True})

    def take(self, max_n: int, block_s: float) -> list[Taken]:
        with self._ready:
            if not self._waiting:
                self._ready.wait(block_s)
            n = min(max_n, len(self._waiting))
            return [self._waiting.popleft() for _ in range(n)]

    def answer(self, answers: Any) -> None:
        self.say({"answers": [[req.entry, body] for req, body in answers]})

    def requeue(self, requests: list[Any]) -> None:
        return None  # the worker's pump puts back what this process never answered

    def load(self, window_s: float) -> tuple[float | None, float | None]:
        return self._load

    def close(self) -> None:
        return None


def _rate(value: object) -> float | None:
    """A rate the worker sent (``None``: unknown, or not a number)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


MAX_ERROR_CHARS = 2000


MAX_SHAPE_DIMS = 8
MAX_DIM = 1 << 22


def clean_facts(facts: object) -> dict[str, Any]:
    """What the team's process says of its replica when it joins, as the worker passes it on
    to the ingress (which checks requests by it and shows it to clients): a sample's shape
    (at most :data:`MAX_SHAPE_DIMS` sizes, each 1 to :data:`MAX_DIM`), its dtype (one the
    replicas decode), the vocabulary's size, the batch, when it stops serving; anything else,
    or anything malformed, is dropped (the process is not trusted)."""

    got: dict[str, Any] = facts if isinstance(facts, dict) else {}
    raw: dict[str, Any] = got["input"] if isinstance(got.get("input"), dict) else {}
    shape = raw.get("shape")
    dims = [_whole(n, 1, MAX_DIM) for n in shape] if isinstance(shape, list) else [None]
    sample = None
    dtype = raw.get("dtype")
    known = isinstance(dtype, str) and dtype in _DTYPES  # a list or dict is not hashable
    if known and len(dims) <= MAX_SHAPE_DIMS and None not in dims:
        high = _whole(raw.get("high"), 1, 1 << 40)
        sample = {"shape": dims, "dtype": dtype, "high": high}
    ends = got.get("ends_at")
    ends_at = None
    if isinstance(ends, int | float) and not isinstance(ends, bool) and abs(ends) < 1e12:
        ends_at = float(ends)  # a NaN fails the bound
    return {
        "input": sample,
        "max_batch": _whole(got.get("max_batch"), 1, 4096) or 1,
        "ends_at": ends_at,
    }


def _whole(v: object, lo: int, hi: int) -> int | None:
    """``v`` if it is a whole number in ``[lo, hi]``, else ``None``."""
    if isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi:
        return v
    return None


def clean_answer(body: object) -> dict[str, Any]:
    """An answer the team's process said, as the worker passes it on: its output, its timing's
    numbers and its error's text, nothing else (the process is not trusted)."""
    if not isinstance(body, dict):
        return {"error": "the service's process answered with something other than an object"}
    if body.get("error") is not None:
        return {"error": str(body["error"])[:MAX_ERROR_CHARS]}
    timing = body.get("timing")
    numbers = (
        {
            str(k)[:40]: v
            for k, v in list(timing.items())[:16]
            if isinstance(v, int | float | str) and not isinstance(v, bool)
        }
        if isinstance(timing, dict)
        else {}
    )
    return {"output": body.get("output"), "timing": numbers}


class RequestPump:
    """The worker's side of a sandboxed replica: it holds the service's queue (the store's
    credentials stay here), joins and leaves the ready set when the child says so, and sends
    the child at most two batches of requests ahead of its answers; each answer the child
    says goes to the request the worker sent under that entry, and to no other.

    Args:
        queue: the service's request queue (``orchestrator.store.ingress.ReplicaQueue``).
        send: writes one message to the child's stdin.
    """

    def __init__(self, queue: RequestQueue, send: Callable[[dict[str, Any]], None]) -> None:
        self.queue = queue
        self.send = send
        self.max_batch = 1
        self._sent: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._joined = threading.Event()
        self._left = threading.Event()
        self._thread = threading.Thread(target=self._run, name="request-pump", daemon=True)

    def on_message(self, message: dict[str, Any]) -> bool:
        """Handle one of the child's messages; ``True`` when it was the pump's."""
        if "join" in message:
            if self._joined.is_set():  # a replica joins once; a second join says nothing
                return True
            join = message["join"] if isinstance(message["join"], dict) else {}
            facts = clean_facts(join.get("facts"))
            self.max_batch = facts["max_batch"]
            self.queue.join(str(join.get("name") or "replica")[:64], facts)
            self._joined.set()
            self._thread.start()
        elif "heartbeat" in message:
            if self._joined.is_set() and not self._left.is_set():
                self.queue.heartbeat()
        elif "leave" in message:
            self._left.set()
            self.queue.leave()
        elif "answers" in message:
            out = []
            with self._lock:
                for item in message["answers"] if isinstance(message["answers"], list) else ():
                    if isinstance(item, list) and len(item) == 2:
                        req = self._sent.pop(str(item[0]), None)
                        if req is not None:
                            out.append((req, clean_answer(item[1])))
            if out:
                self.queue.answer(out)
        else:
            return False
        return True

    def _run(self) -> None:
        beat = 0.0
        while not self._left.is_set():
            with self._lock:
                room = 2 * self.max_batch - len(self._sent)
            if room <= 0:
                time.sleep(0.001)
                continue
            try:
                taken = self.queue.take(room, TAKE_BLOCK_S)
                if time.monotonic() - beat >= HEARTBEAT_S:
                    beat = time.monotonic()
                    self.send({"load": list(self.queue.load(LOAD_WINDOW_S))})
            except Exception:  # the store briefly unreachable: try again
                time.sleep(0.5)
                continue
            if self._left.is_set():  # taken after the child left: for the replicas that stay
                self.queue.requeue(taken)
                return
            if taken:
                with self._lock:
                    for r in taken:
                        self._sent[r.entry] = r
                self.send(
                    {
                        "requests": [
                            {"entry": r.entry, "arrived_at": r.arrived_at, "payload": r.payload}
                            for r in taken
                        ]
                    }
                )

    def close(self) -> None:
        """The child is gone: leave the ready set, and put back what it never answered, for
        the replicas that stay (none lost; with none left, their wait times out)."""
        self._left.set()
        with contextlib.suppress(Exception):
            self.queue.leave()
            with self._lock:
                left, self._sent = list(self._sent.values()), {}
            if left:
                self.queue.requeue(left)
        with contextlib.suppress(Exception):
            self.queue.close()
