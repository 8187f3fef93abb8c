"""Serving a forward-only workload: real forward passes under the batcher of
:mod:`workers.serving`, as a load test (:func:`load_test`, on the virtual clock) or as a job's
live service (:class:`ServeRun`, on the wall clock).

Each batch the batcher sends is a real forward pass of the workload's model on that many
samples (made before the clock starts: a request arrives with its input, so making it is not
serving it), under ``torch.inference_mode`` and the run's precision, timed with the device
synchronised; that time is the batch's service time on the virtual clock (see
:mod:`workers.serving` for why the clock is virtual and what that assumes). ``warmup`` forward
passes at each batch size the batcher may send run first, untimed, so the first requests do not
pay for allocator and kernel warm-up the rest never see.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import math
import time
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import torch

from workers.arrivals import parse_trace, poisson_arrivals, repeat_trace
from workers.devices import to_device
from workers.errors import HarnessConfigError
from workers.latency import LatencySketch
from workers.optimizations import autocast_context
from workers.quantize import DEFAULT_TOLERANCE, quantized
from workers.result import RunResult
from workers.runstats import PeakMemory
from workers.serving import ServeTrace, serve
from workers.window import RecentSteps
from workers.workloads.base import Workload

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager

    from workers.config import HarnessConfig


class Replica(Protocol):
    """What a service run reads of the harness that built it (``workers.harness.Harness``:
    named by its shape, so this module does not import the harness that dispatches to it)."""

    config: HarnessConfig
    rank: int
    world_size: int
    device: torch.device
    workload: Workload
    _report: Callable[[dict[str, Any]], None] | None
    _report_every_s: float
    _should_stop: Callable[[], bool]
    _fence: Callable[[], bool]
    _autocast: Callable[[], AbstractContextManager[Any]]

    @property
    def model(self) -> torch.nn.Module: ...


__all__ = ["LOAD_WINDOW_S", "Replica", "ServeRun", "load_test", "serve_arrivals"]

log = logging.getLogger(__name__)

LOAD_WINDOW_S = 5.0
"""The seconds over which a service reports its offered load, served rate and busy share
(``window_offered_rps``, ``window_served_rps``, ``window_busy``): short, so that the SLA
guard's scaling (``policies.replicas``) sees a load that changes within seconds."""


def load_test(
    workload: Workload,
    arrivals: Sequence[float],
    *,
    max_batch: int,
    max_delay_s: float | None,
    replicas: int = 1,
    timeout_s: float | None = None,
    device: torch.device | None = None,
    precision: str = "fp32",
    warmup: int = 2,
    quantize: str = "none",
    tolerance: float = DEFAULT_TOLERANCE,
    compile: bool = False,
    seed: int = 0,
) -> ServeTrace:
    """Serve ``arrivals`` with ``workload``'s model (see the module doc).

    ``replicas`` are identical copies of the server measured here: one process times the
    forward pass, and each replica (one per GPU in a placed service) takes that long.
    ``quantize``: ``int8`` serves the dynamically quantized model once its outputs are within
    ``tolerance`` of fp32's on ``seed``'s inputs (``workers.quantize``; the trace carries the
    error). ``compile``: the model under ``torch.compile`` (its compilations happen in the
    untimed warm-up, one per batch size at most).

    Raises:
        HarnessConfigError: a training workload (a service answers with forward passes only),
            or a batcher setting out of range.
        QuantizationRefused: the quantized outputs are further from fp32's than ``tolerance``.
    """
    if workload.train:
        raise HarnessConfigError(
            "workload: a load test needs a forward-only workload (its Workload has train=True; "
            "a service needs train=False)"
        )
    device = device or torch.device("cpu")
    served, error = quantized(workload, quantize, tolerance, seed=seed, device=device)
    model: Any = served.to(device).eval()
    if compile:
        model = torch.compile(model)
    autocast = autocast_context(precision, device)
    inputs = {n: to_device(workload.make_batch(0, n), device) for n in range(1, max_batch + 1)}

    def forward(n: int) -> float:
        batch = inputs[n]
        _sync(device)
        t0 = time.perf_counter()
        with torch.inference_mode(), autocast():
            workload.loss(model, batch)
        _sync(device)
        return time.perf_counter() - t0

    for n in range(1, max_batch + 1):
        for _ in range(warmup):
            forward(n)
    trace = serve(
        arrivals,
        forward,
        max_batch=max_batch,
        max_delay_s=max_delay_s,
        replicas=replicas,
        timeout_s=timeout_s,
    )
    trace.quant_error = error
    return trace


def load_weights(model: torch.nn.Module, weights: dict[str, Any]) -> str:
    """Load the model tensors of another job's final checkpoint (``serve.weights``, set by the
    scheduler for ``serve.from_job``) into ``model``; returns the step directory read. The
    checkpoint is checked to be of the workload and arguments the scheduler named, which are
    the served model's.

    Raises:
        HarnessConfigError: that job left no checkpoint.
        CheckpointError: it cannot be read, or its tensors do not fit the model.
    """
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        set_model_state_dict,
    )

    from workers.checkpoint import load_checkpoint, load_tensors

    location = str(weights["location"])
    ckpt = load_checkpoint(location, str(weights["workload"]), dict(weights["workload_args"]))
    if ckpt is None:
        raise HarnessConfigError(f"serve.from_job: no checkpoint at {location}")
    state = {"model": get_model_state_dict(model)}
    source = load_tensors(location, ckpt, state)  # the model's tensors only: no optimizer
    set_model_state_dict(model, state["model"])
    log.info("serving the weights of %s (step %d)", source, ckpt.step)
    return source


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def serve_arrivals(settings: dict[str, Any], duration_s: float, seed: int) -> list[float]:
    """The arrival times a service's settings give over ``duration_s``: its trace (repeated
    to cover the duration), or a Poisson stream at ``rate_rps``."""
    trace = settings.get("trace")
    if trace is None:
        return poisson_arrivals(float(settings["rate_rps"]), duration_s, seed)
    return repeat_trace(parse_trace("\n".join(str(t) for t in trace)), duration_s)


class ServeRun:
    """One rank of a live service: the job's replica on this rank's GPU.

    Each rank is one replica with its own batcher, serving the requests ``i`` with
    ``i % world_size == rank`` of the job's arrival stream (a random split of a Poisson stream
    is a Poisson stream at the rate over the replicas: a balancer routing at random). Its
    figures are request latencies, arrival to answer; its throughput is requests answered per
    second (one request is one sample). It has nothing to checkpoint: a stopped service starts
    again with a fresh stream, unless ``serve.start_at`` says where the stream began on the
    wall clock (a resized service: it goes on from there). The requests due while it was
    restarting are not offered to it: with ``serve.stopped_at`` (when the run before stopped
    serving, its reports' ``served_until``) they count as ``dropped`` (also apart, as
    ``relaunch_dropped``), since no replica answered them. Reports carry the harness's keys
    (so ``orch show``, the SLA verdict and the guard read a service as any job) plus
    ``queue_p95_ms``, ``mean_batch``, ``offered_rps``, ``dropped``, ``served_until`` (the
    wall-clock time of the report) and ``quant_error`` (the int8 model's output error against
    fp32, when ``serve.quantize`` is ``int8``: checked against ``quant_tolerance`` before the
    first request, and the service refused when over it), and for the guard's scaling the
    last :data:`LOAD_WINDOW_S` seconds' ``window_offered_rps`` (the whole stream's),
    ``window_served_rps`` (this replica's times the replicas) and ``window_busy`` (the share
    of them this replica spent serving batches), and ``stream_started_at``.
    """

    def __init__(self, h: Replica) -> None:
        if h.workload.train:
            raise HarnessConfigError(
                f"workload: a service answers with forward passes: {h.config.workload!r} is a "
                "training workload (a service needs one whose Workload has train=False, such "
                "as infer)"
            )
        self.h = h
        cfg = h.config
        settings = dict(cfg.serve or {})
        self.max_delay_s = settings.get("max_delay_s")
        if settings.get("weights"):  # serve.from_job: what a finished job trained
            load_weights(h.workload.model, settings["weights"])
        # quantized (and its accuracy checked) before serving: a refusal stops it here
        self.model, self.quant_error = quantized(
            h.workload,
            str(settings.get("quantize") or "none"),
            float(settings.get("quant_tolerance") or DEFAULT_TOLERANCE),
            seed=cfg.seed,
            device=h.device,
        )
        self.timeout_s = settings.get("timeout_s")
        duration = float(cfg.duration_s or 0.0)
        every = serve_arrivals(settings, duration, cfg.seed)
        self.stream = every  # all replicas' arrivals: the offered load is read from them
        self.arrivals = [t for i, t in enumerate(every) if i % h.world_size == h.rank]
        self.duration_s = duration
        self.start_at: float | None = settings.get("start_at")
        self.stopped_at: float | None = settings.get("stopped_at")
        self.offset = 0.0  # where in the stream this run starts (seconds)
        self.relaunch_dropped = 0  # this replica's requests due while no run served them
        self.batch_log: deque[tuple[float, float, int]] = deque()  # (ended, took_s, requests)
        self.busy_seen = 0.0
        self.latency = LatencySketch()
        self.queue = LatencySketch()
        self.recent = RecentSteps()  # requests answered in the last seconds: the guard's
        self.served = self.dropped = self.batches = self.batched = 0
        self.first_step_at: float | None = None
        self.last_report = -math.inf
        self.started = 0.0
        self.peak = PeakMemory(h.device)

    def execute(self) -> RunResult:
        """Serve the stream on the wall clock until its end, a stop, or a lost fence."""
        h = self.h
        self.peak.reset()
        model = (h.model if self.quant_error is None else self.model).eval()
        mb = h.config.micro_batch
        inputs = {n: to_device(h.workload.make_batch(0, n), h.device) for n in range(1, mb + 1)}
        status = ["finished"]

        def forward(n: int) -> float:
            _sync(h.device)
            t0 = time.perf_counter()
            with torch.inference_mode(), h._autocast():
                h.workload.loss(model, inputs[n])
            _sync(h.device)
            return time.perf_counter() - t0

        for n in range(1, mb + 1):  # warm-up, as a load test does
            forward(n)
        self.started = time.perf_counter()
        if self.start_at is None:
            self.start_at = time.time()
        else:  # a resized service: the stream goes on where it is now
            self.offset = min(self.duration_s, max(0.0, time.time() - self.start_at))
            if self.stopped_at is not None:  # nobody answered what was due since the stop
                since = max(0.0, self.stopped_at - self.start_at)
                due = bisect.bisect_left(self.arrivals, self.offset)
                self.relaunch_dropped = max(0, due - bisect.bisect_left(self.arrivals, since))
        arrivals = [t - self.offset for t in self.arrivals if t >= self.offset]

        def clock() -> float:
            return time.perf_counter() - self.started

        def wait_until(t: float) -> bool:
            while True:
                if not h._fence():
                    status[0] = "fenced"
                    return False
                if h._should_stop():
                    status[0] = "stopped"
                    return False
                left = t - clock()
                if left <= 0:
                    return True
                time.sleep(min(left, 0.05))

        serve(
            arrivals,
            forward,
            max_batch=mb,
            max_delay_s=self.max_delay_s,
            timeout_s=self.timeout_s,
            clock=clock,
            wait_until=wait_until,
            on_batch=self._took,
        )
        if status[0] != "fenced":
            self._emit(status[0])
        return self._result(status[0])

    def _took(self, trace: ServeTrace) -> None:
        """A batch was answered: its requests into the figures (the trace keeps none)."""
        now = time.perf_counter()
        self.batch_log.append((now, trace.busy_s - self.busy_seen, len(trace.latency_ms)))
        self.busy_seen = trace.busy_s
        while self.batch_log and self.batch_log[0][0] < now - LOAD_WINDOW_S:
            self.batch_log.popleft()
        for lat, q in zip(trace.latency_ms, trace.queue_ms, strict=True):
            self.latency.add(lat)
            self.queue.add(q)
            self.recent.add(now, lat / 1000.0, 1)
        self.served += len(trace.latency_ms)
        self.dropped = trace.dropped
        self.batches += 1
        self.batched += trace.batches[-1]
        trace.latency_ms.clear()
        trace.queue_ms.clear()
        trace.batches.clear()
        if self.first_step_at is None:
            self.first_step_at = time.time()
        if now - self.last_report >= self.h._report_every_s:
            self._emit("running")

    def _figures(self) -> dict[str, Any]:
        now = time.perf_counter()
        elapsed = now - self.started
        window = self.recent.summary(now)
        load = self._load(now, elapsed)
        # the window's rate is this replica's requests answered per second of the load window,
        # not over their latencies (which overlap while requests queue), nor the latency
        # window's count over its 30 s (it keeps at most 512 requests: 17/s at most)
        served = load["window_served_rps"]
        window["window_samples_per_s"] = None if served is None else served / self.h.world_size
        return {
            "p50_ms": self.latency.quantile(0.50),
            "p95_ms": self.latency.quantile(0.95),
            "p99_ms": self.latency.quantile(0.99),
            "samples_per_s": self.served / elapsed if elapsed > 0 else None,
            "tokens_per_s": None,
            "measured_steps": self.served,
            "queue_p95_ms": self.queue.quantile(0.95),
            "mean_batch": self.batched / self.batches if self.batches else None,
            "offered_rps": len(self.arrivals) / self.duration_s if self.duration_s else None,
            "dropped": self.dropped + self.relaunch_dropped,
            "relaunch_dropped": self.relaunch_dropped,
            "quant_error": self.quant_error,
            "stream_started_at": self.start_at,
            "served_until": time.time(),
            **window,
            **load,
        }

    def _load(self, now: float, elapsed: float) -> dict[str, float | None]:
        """The last :data:`LOAD_WINDOW_S` seconds' offered and served requests per second
        and busy share (see the class doc)."""
        span = min(LOAD_WINDOW_S, elapsed)
        if span <= 0:
            return {"window_offered_rps": None, "window_served_rps": None, "window_busy": None}
        at = self.offset + elapsed  # the stream's clock
        offered = bisect.bisect_left(self.stream, at) - bisect.bisect_left(self.stream, at - span)
        recent = [b for b in self.batch_log if b[0] >= now - span]
        return {
            "window_offered_rps": offered / span,
            "window_served_rps": sum(b[2] for b in recent) * self.h.world_size / span,
            "window_busy": min(1.0, sum(b[1] for b in recent) / span),
        }

    def _emit(self, status: str) -> None:
        h = self.h
        self.last_report = time.perf_counter()
        if h._report is None:
            return
        report = {
            "status": status,
            "step": self.batches,
            "total_steps": None,
            "elapsed_s": time.perf_counter() - self.started,
            "loss": None,
            "device": str(h.device),
            "rank": h.rank,
            "world_size": h.world_size,
            "global_batch": h.config.micro_batch,
            "warmup_steps": 0,
            "first_step_at": self.first_step_at,
            "time_left_s": max(
                0.0, self.duration_s - self.offset - (time.perf_counter() - self.started)
            ),
            "peak_mem_mb": self.peak.peak_mb(),
            **self._figures(),
        }
        try:
            h._report(report)
        except Exception:  # a failing metrics sink (Redis briefly down) must not stop it
            log.warning("report callback failed; the service goes on", exc_info=True)

    def _result(self, status: str) -> RunResult:
        names = {f.name for f in dataclasses.fields(RunResult)}
        figures = {k: v for k, v in self._figures().items() if k in names}
        return RunResult(
            status=status,
            steps_done=self.batches,
            resumed_from_step=None,
            loss=None,
            **figures,
            peak_mem_mb=self.peak.peak_mb(),
            warmup_steps=0,
            elapsed_s=time.perf_counter() - self.started,
            device=str(self.h.device),
            world_size=self.h.world_size,
            global_batch=self.h.config.micro_batch,
            param_fingerprint=0.0,  # a service trains nothing: no parameters to compare
            first_step_at=self.first_step_at,
            forward_only=True,
        )
