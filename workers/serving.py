"""Serving under load: open-loop request arrivals, a dynamic batcher, replicas, request latency.

A service's SLA is about *requests*: the time from a request's arrival to its answer, at an
offered load. The time of one batch (what a harness step measures) is only the last part of
it: a request also waits for its batch to form and for the batches ahead of it. This module
counts all of it:

* **Arrivals** (:mod:`workers.arrivals`): an open-loop stream, seeded Poisson at a rate or the
  times of a trace file. Open loop: requests arrive whether or not the service keeps up, as
  users do (a closed loop would slow its own arrivals and hide the tail).
* **The batcher** (:func:`serve`): requests queue in arrival order; when a replica is free, the
  next batch leaves as soon as it is full (``max_batch`` requests) or its oldest request has
  waited ``max_delay_s``, whichever comes first (Triton's dynamic batcher and its
  ``max_queue_delay``). ``max_delay_s=0`` is no batching window (whatever is queued leaves at
  once); ``max_delay_s=None`` is a fixed batch (it waits until full; the stream's last partial
  batch leaves with the last request). A request that waited longer than ``timeout_s`` by the
  time its batch would leave is dropped and counted.
* **Replicas**: ``replicas`` identical servers (one per GPU); each batch goes to the one that is
  free first.

The clock is virtual, driven by measured service times: ``service(n)`` returns the seconds a
batch of ``n`` takes, and a live run (:mod:`workers.serve_run`) runs the model's forward pass
for real there and returns what it measured. Idle gaps between arrivals are skipped rather
than slept through, so a load test of minutes of traffic takes the time of its forward passes;
what each request sees (its queueing and its batch's real service time) is the same as in real
time as long as a forward pass takes as long after an idle gap as after a busy one.

Hand-written: the batching rule is a dozen lines, and the libraries that implement it (Triton,
Ray Serve's ``@serve.batch``) run it on a wall clock inside a server, which can neither be
replayed against hand-computed waits nor share the tuner's measured service times.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from workers.errors import HarnessConfigError
from workers.latency import LatencySketch

__all__ = ["ServeTrace", "serve"]


@dataclass
class ServeTrace:
    """What a load test measured, per request and per batch.

    Attributes:
        latency_ms: arrival to answer, of every served request (in arrival order).
        queue_ms: arrival to its batch leaving, of every served request.
        batches: the size of every batch, in dispatch order.
        dropped: requests that waited past the timeout.
        offered: requests that arrived.
        span_s: first arrival to last answer.
        busy_s: replica-seconds spent serving batches.
        quant_error: the served model's output error against fp32 (relative L2;
            ``workers.quantize``), ``None`` when it is not quantized.
    """

    latency_ms: list[float] = field(default_factory=list)
    queue_ms: list[float] = field(default_factory=list)
    batches: list[int] = field(default_factory=list)
    dropped: int = 0
    offered: int = 0
    span_s: float = 0.0
    busy_s: float = 0.0
    quant_error: float | None = None

    def summary(self) -> dict[str, float | int | None]:
        """The figures a report carries: request p50/p95/p99, queueing p95, mean batch,
        served requests per second, dropped requests, replica busy seconds and the
        quantized model's output error."""
        lat, queue = LatencySketch(), LatencySketch()
        for v in self.latency_ms:
            lat.add(v)
        for v in self.queue_ms:
            queue.add(v)
        served = len(self.latency_ms)
        return {
            "request_p50_ms": lat.quantile(0.50),
            "request_p95_ms": lat.quantile(0.95),
            "request_p99_ms": lat.quantile(0.99),
            "queue_p95_ms": queue.quantile(0.95),
            "mean_batch": sum(self.batches) / len(self.batches) if self.batches else None,
            "served_rps": served / self.span_s if self.span_s > 0 else None,
            "requests": served,
            "dropped": self.dropped,
            "offered": self.offered,
            "busy_s": self.busy_s,
            "quant_error": self.quant_error,
        }


def serve(
    arrivals: Sequence[float],
    service: Callable[[int], float],
    *,
    max_batch: int,
    max_delay_s: float | None,
    replicas: int = 1,
    timeout_s: float | None = None,
    clock: Callable[[], float] | None = None,
    wait_until: Callable[[float], bool] | None = None,
    on_batch: Callable[[ServeTrace], None] | None = None,
) -> ServeTrace:
    """Run the arrivals through the batcher and ``replicas`` servers (see the module doc).

    Args:
        arrivals: arrival times in seconds, never decreasing.
        service: ``service(n)``: seconds a batch of ``n`` requests takes (called once per
            batch, in dispatch order: a live run's forward pass).
        max_batch: the most requests in one batch.
        max_delay_s: how long the oldest queued request may wait for its batch to fill
            (``0``: no window; ``None``: a fixed batch, which waits until full).
        replicas: identical servers.
        timeout_s: a request that would leave after waiting longer is dropped (``None``: never).
        clock: for a live service, seconds since its arrivals' time 0 on the wall clock: a
            batch then leaves no earlier than its time comes (``wait_until`` waits for it) and
            is timed from when it really left. ``None``: the virtual clock.
        wait_until: ``wait_until(t)`` waits until ``clock()`` reaches ``t``; it returns
            ``False`` to end the run there (a stop request): the requests not yet served are
            neither served nor counted as dropped.
        on_batch: called after each batch with the trace, whose lists then end with that
            batch's requests (a live service reads them and may clear the lists, so that a
            long run keeps none of them).

    Raises:
        HarnessConfigError: a setting out of range.
    """
    _check(max_batch, max_delay_s, replicas, timeout_s)
    trace = ServeTrace(offered=len(arrivals))
    free = [0.0] * replicas  # when each replica is next free (a heap)
    n, i = len(arrivals), 0
    last_done = 0.0
    while i < n:
        ready = heapq.heappop(free)
        leave = _leaves(arrivals, i, ready, max_batch, max_delay_s)
        while timeout_s is not None and i < n and leave - arrivals[i] > timeout_s:
            trace.dropped += 1  # it waited too long: dropped, and the batch forms without it
            i += 1
            if i < n:
                leave = _leaves(arrivals, i, ready, max_batch, max_delay_s)
        if i >= n:
            break
        if clock is not None:
            if wait_until is not None and not wait_until(leave):
                trace.offered = len(trace.latency_ms) + trace.dropped  # what it reached
                break
            leave = max(leave, clock())
        j = i
        while j < n and j - i < max_batch and arrivals[j] <= leave:
            j += 1
        took = float(service(j - i))
        done = leave + took
        for k in range(i, j):
            trace.latency_ms.append((done - arrivals[k]) * 1000.0)
            trace.queue_ms.append((leave - arrivals[k]) * 1000.0)
        trace.batches.append(j - i)
        trace.busy_s += took
        if on_batch is not None:
            on_batch(trace)
        last_done = max(last_done, done)
        heapq.heappush(free, done)
        i = j
    if arrivals:
        trace.span_s = max(0.0, last_done - arrivals[0])
    return trace


def _leaves(
    arrivals: Sequence[float], i: int, ready: float, max_batch: int, max_delay_s: float | None
) -> float:
    """When the batch headed by request ``i`` leaves, its replica free at ``ready``: when full
    or when its head has waited ``max_delay_s``, whichever is first, and not before ``ready``
    nor before its head arrives; a fixed batch short of requests at the stream's end leaves
    with the last one."""
    head = arrivals[i]
    last = i + max_batch - 1
    full_at = arrivals[last] if last < len(arrivals) else math.inf
    window_end = head + max_delay_s if max_delay_s is not None else math.inf
    formed = min(full_at, window_end)
    if math.isinf(formed):
        formed = arrivals[-1]
    return max(ready, head, formed)


def _check(
    max_batch: int, max_delay_s: float | None, replicas: int, timeout_s: float | None
) -> None:
    if not isinstance(max_batch, int) or isinstance(max_batch, bool) or max_batch < 1:
        raise HarnessConfigError(f"max_batch must be an integer >= 1, got {max_batch!r}")
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 1:
        raise HarnessConfigError(f"replicas must be an integer >= 1, got {replicas!r}")
    for name, value in (("max_delay_s", max_delay_s), ("timeout_s", timeout_s)):
        if value is not None and not (
            isinstance(value, int | float) and math.isfinite(value) and value >= 0
        ):
            raise HarnessConfigError(f"{name} must be a finite number >= 0, got {value!r}")
