"""How many replicas a service should run: the scaling decision of the SLA guard (issue 24).

Pure (plain values in, a value out): the live loop's guard feeds it each service's measured
window (``orchestrator.control.sla_guard``), and any simulator that models request latency
can feed it the same figures. It only *chooses* a replica count; the scheduling policy makes
room for it as it does for any interactive work (``RunningJob.want_gpus``), and the loop acts:
a service with an endpoint (the default) is resized in place, its staying replicas serving
throughout; a self-loading one (``serve.endpoint: false``) by the resize path every elastic
job takes (a graceful stop, a relaunch at the new size).

Two signals, as the autoscalers that serve models use them (Knative's and Kubernetes' HPA
rule ``desired = ceil(current x measured / target)``; Ray Serve's target ongoing requests):

* **the tail**: the window's request-latency percentile at ``near`` of the SLA's ceiling or
  over it calls for one more replica (the tail is about to break the SLA);
* **the offered load**: the replicas' busy time, scaled by offered over served requests (a
  service falling behind serves less than it is offered), is the replica-seconds per second
  the load needs (:func:`needed_replicas`); more than ``target_util`` of every replica busy
  calls for ``ceil(needed / target_util)`` replicas. So a load that doubles scales the service
  before its queue, and then its tail, grows.

It scales down by one replica when both have margin: the tail at or under ``margin`` of the
ceiling and the load needing at most ``down_util`` of each of one replica fewer. Hysteresis, so
that it does not flap: up and down have separate thresholds (``target_util`` against
``down_util``, ``near`` against ``margin``: between them nothing changes) and a condition must
hold without a break for ``up_hold_s`` (up) or the longer ``down_hold_s`` (down) before it
acts; a window of fewer than ``min_requests`` answered requests says nothing of the tail. The
count stays within the job's GPU range and what its team's quota leaves.

**A relaunch** answers nothing for as long as the service takes to start
(``ServiceLimits.relaunch_s``: its current run's, launch to first answer; 0 for a service
resized in place, which has no gap, so nothing below holds it back). A service's
stream has an end (``ServiceReading.time_left_s``), so a resize is worth its relaunch only with
enough of the stream left: up, only if the new run would serve before the end (more than
``relaunch_s`` left); down, only if the GPU it frees is free for at least as long as the
relaunch leaves the service unanswered (``down_payback`` x ``relaunch_s`` left, 2 by default:
the time left minus the relaunch at least the relaunch). The decision then says why it stays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = [
    "ReplicaConfig",
    "Scale",
    "ScaleWatch",
    "ServiceLimits",
    "ServiceReading",
    "needed_replicas",
    "scale_replicas",
]


@dataclass(frozen=True)
class ReplicaConfig:
    """The scaling thresholds (see the module doc).

    Attributes:
        near: the tail at this fraction of the ceiling (or over) calls for a replica more.
        margin: the tail at or under this fraction of the ceiling has margin (may go down).
        target_util: the busy share each replica is sized for.
        down_util: one replica fewer only if each would then be busy at most this share.
        up_hold_s: seconds a call for more must hold before it acts.
        down_hold_s: seconds a call for fewer must hold before it acts.
        min_requests: a window with fewer answered requests says nothing of the tail.
        down_payback: one replica fewer only with at least this many relaunches' time left of
            the stream (see the module doc).
    """

    near: float = 0.8
    margin: float = 0.5
    target_util: float = 0.6
    down_util: float = 0.4
    up_hold_s: float = 10.0
    down_hold_s: float = 30.0
    min_requests: int = 20
    down_payback: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.margin < self.near:
            raise ValueError(f"margin must be in (0, near={self.near}), got {self.margin}")
        if not 0 < self.down_util < self.target_util <= 1:
            raise ValueError(
                f"need 0 < down_util < target_util <= 1, got {self.down_util}, {self.target_util}"
            )
        if self.down_payback < 1:
            raise ValueError(f"down_payback must be >= 1, got {self.down_payback}")


@dataclass(frozen=True)
class ServiceReading:
    """One report of a running service, as the scaling decision reads it.

    Attributes:
        at: the round's clock (seconds).
        requests: requests answered in the latency window.
        latency_ms: the window's request-latency percentile (the SLA's).
        offered_rps: requests per second arriving, over all replicas (``None``: unknown).
        served_rps: requests per second answered, over all replicas.
        busy: the share of the load window a replica spent serving batches (0..1).
        time_left_s: seconds left of its arrival stream (``None``: unknown).
    """

    at: float
    requests: int
    latency_ms: float | None = None
    offered_rps: float | None = None
    served_rps: float | None = None
    busy: float | None = None
    time_left_s: float | None = None


@dataclass(frozen=True)
class ServiceLimits:
    """What bounds a service's replica count, and its latency SLA.

    Attributes:
        replicas: what it runs now (its GPUs).
        lo, hi: its ``resources.gpus`` range.
        quota_room: GPUs its team may still take (``None``: its team has no cap).
        percentile, max_ms: the request-latency SLA.
        relaunch_s: seconds a relaunch leaves it unanswered: its current run's start, from
            launch to its first answer (``None``: not known yet).
    """

    replicas: int
    lo: int
    hi: int
    quota_room: int | None
    percentile: int
    max_ms: float
    relaunch_s: float | None = None

    @property
    def top(self) -> int:
        """The most replicas it may have now: its ``hi``, or fewer by its team's quota."""
        if self.quota_room is None:
            return self.hi
        return max(self.replicas, min(self.hi, self.replicas + self.quota_room))


@dataclass(frozen=True)
class ScaleWatch:
    """A service's hysteresis state: since when it has called for more, or for fewer."""

    up_since: float | None = None
    down_since: float | None = None


@dataclass(frozen=True)
class Scale:
    """A scaling decision: run ``replicas`` (the same count as now: it would grow but its
    bounds say no, and ``reason`` says which), and why."""

    replicas: int
    reason: str


def needed_replicas(r: ServiceReading, replicas: int) -> float | None:
    """Replica-seconds per second the offered load needs: each replica's busy share times the
    replicas, scaled by offered over served requests (``None``: not measured)."""
    if r.busy is None or r.offered_rps is None:
        return None
    if r.served_rps is None or r.served_rps <= 0:
        return 0.0 if r.offered_rps == 0 else None
    return r.busy * replicas * r.offered_rps / r.served_rps


def scale_replicas(
    limits: ServiceLimits, r: ServiceReading, watch: ScaleWatch, cfg: ReplicaConfig
) -> tuple[ScaleWatch, Scale | None]:
    """One round of the scaling decision for one service: its new hysteresis state, and a
    :class:`Scale` when a call held long enough (``None``: keep what it runs)."""
    n, ceiling = limits.replicas, limits.max_ms
    tail = r.latency_ms if r.requests >= cfg.min_requests else None
    need = needed_replicas(r, n)
    by_load = math.ceil(need / cfg.target_util - 1e-9) if need is not None else None
    ups: list[str] = []
    if tail is not None and tail >= cfg.near * ceiling:
        ups.append(f"p{limits.percentile} {tail:.1f} ms near ceiling {ceiling:g} ms")
    if by_load is not None and by_load > n:
        ups.append(
            f"offered {r.offered_rps:,.0f} req/s needs {by_load} replicas at "
            f"{cfg.target_util:.0%} busy"
        )
    calm = tail is None or tail <= cfg.margin * ceiling
    # each replica's busy share with one fewer (None: it cannot go down, or it is unknown)
    fewer = need / (n - 1) if need is not None and n > limits.lo else None
    fits = fewer is not None and fewer <= cfg.down_util
    now = r.at
    up_since = (now if watch.up_since is None else watch.up_since) if ups else None
    down_since = None
    if not ups and calm and fits:
        down_since = now if watch.down_since is None else watch.down_since
    left, cost = r.time_left_s, limits.relaunch_s
    if up_since is not None and now - up_since >= cfg.up_hold_s:
        top = limits.top
        want = min(top, max(n + 1, by_load or 0))
        if want <= n:
            bound = "its gpus.max" if top == limits.hi else "its team's quota"
            return ScaleWatch(), Scale(n, f"stays at {n} replicas ({bound}): " + "; ".join(ups))
        if left is not None and cost is not None and left <= cost:
            return ScaleWatch(), Scale(
                n,
                f"stays at {_count(n)}: its stream ends in {left:.0f} s, before a relaunch "
                f"({cost:.0f} s) would serve: " + "; ".join(ups),
            )
        return ScaleWatch(), Scale(want, f"scaling {n} -> {want} replicas: " + "; ".join(ups))
    if down_since is not None and fewer is not None and now - down_since >= cfg.down_hold_s:
        if left is not None and cost is not None and left < cfg.down_payback * cost:
            return ScaleWatch(), Scale(
                n,
                f"stays at {_count(n)}: its stream ends in {left:.0f} s, under "
                f"{cfg.down_payback:g}x its relaunch ({cost:.0f} s without an answer)",
            )
        if tail is None:
            said = "too few requests in its window to judge its tail"
        else:
            pct = limits.percentile
            said = f"p{pct} {tail:.1f} ms under {cfg.margin:g}x ceiling {ceiling:g} ms"
        return ScaleWatch(), Scale(
            n - 1,
            f"scaling {n} -> {n - 1} replicas: offered {r.offered_rps or 0:,.0f} req/s keeps "
            f"{_replicas(n - 1)} {fewer:.0%} busy; {said}",
        )
    return ScaleWatch(up_since, down_since), None


def _count(k: int) -> str:
    return "1 replica" if k == 1 else f"{k} replicas"


def _replicas(k: int) -> str:
    return "1 replica" if k == 1 else f"{k} replicas each"
