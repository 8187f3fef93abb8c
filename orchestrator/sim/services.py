"""Services in the simulator: offered load over time, request latency per replica, scaling.

A service (issue 24) is an interactive job whose GPUs are its replicas. The simulator gives it
three things the live pool measures:

* **an offered load over time** (:class:`LoadProfile`): requests/s, piecewise constant
  (steps, or a seeded diurnal curve sampled every ``step_s``);
* **a request-latency model per replica** (:class:`LatencyCurve`): the request p99 one replica
  gives at an offered load per replica, *the measured curve interpolated*: the points of
  ``bench/serving/results/serving.json`` (dynamic batching, each a seeded Poisson load test of
  the shipped batcher), made monotone by a running maximum (the measured points are noisy: one
  seed per load; the envelope is the pessimistic reading), linear between points, the first
  point's p99 below it. A replica's capacity is the highest measured load whose p99 met the
  ceiling (the benchmark's bisected rate); above it the queue grows without bound: the p99 is
  infinite (a miss). Load is split evenly over the replicas (one batcher queue per replica fed
  round-robin, as ``workers.serving`` routes); a replica's busy share is its load over its
  capacity (at most 1), which is what the live workers report as ``window_busy`` to first
  order. A replica that is starting (a start or a resize: live, a graceful stop and a relaunch
  of every replica) serves nothing: those seconds miss the SLA while load is offered;
* **the SLA guard's scaling** (:func:`policies.replicas.scale_replicas`, the function the live
  guard calls, with the same :class:`~policies.replicas.ReplicaConfig` and the same
  :class:`~policies.replicas.ServiceReading` fields): every round it reads the last window
  (requests answered, the p99, offered and served requests/s, busy share) and the replicas it
  asks for become the snapshot's ``RunningJob.want_gpus``; the scheduling policy resizes the
  service as it does live (``policies.scheduling.services``).

Accounting (:class:`ServiceStats`): a service's life is from its submission to its end (it runs
``duration`` seconds of serving); every second of it meets the SLA or not (the model's p99 at
that second's load against the ceiling; queued or starting: not met while load is offered).
SLA attainment = seconds met / seconds of life. GPU-seconds: what its replicas held.
"""

from __future__ import annotations

import bisect
import json
import math
import random
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.sim.models import JobModel
from orchestrator.sim.simjob import QUEUED, RUNNING, SimJob
from policies.replicas import ReplicaConfig, ScaleWatch, ServiceLimits, ServiceReading
from policies.replicas import scale_replicas as _scale
from policies.snapshot import TeamView

__all__ = [
    "LatencyCurve",
    "LoadProfile",
    "ServiceJobModel",
    "ServiceSpec",
    "ServiceStats",
    "Services",
    "peak_replicas",
]

SERVING_RESULTS = Path(__file__).resolve().parents[2] / "bench/serving/results/serving.json"


@dataclass(frozen=True)
class LoadProfile:
    """Requests/s offered over time: ``rps[i]`` from ``times[i]`` until ``times[i + 1]``
    (the last value until the end). ``times`` start at 0 and increase."""

    times: tuple[float, ...]
    rps: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.times or self.times[0] != 0 or len(self.times) != len(self.rps):
            raise ValueError("a load profile needs times from 0, one rate per time")
        if any(b <= a for a, b in zip(self.times, self.times[1:], strict=False)):
            raise ValueError("load profile times must increase")
        if any(r < 0 for r in self.rps):
            raise ValueError(f"offered load must be >= 0 requests/s, got {min(self.rps)}")

    @classmethod
    def steps(cls, *points: tuple[float, float]) -> LoadProfile:
        """From ``(time, rps)`` points (the first at time 0)."""
        return cls(tuple(t for t, _ in points), tuple(r for _, r in points))

    @classmethod
    def diurnal(
        cls,
        low: float,
        peak: float,
        period_s: float,
        span_s: float,
        step_s: float = 60.0,
        noise: float = 0.05,
        seed: int = 0,
        phase: float = 0.0,
    ) -> LoadProfile:
        """A day-shaped load: ``low`` at the trough, ``peak`` at the crest of a cosine of
        ``period_s``, sampled every ``step_s`` over ``span_s``, each step times a seeded
        uniform factor in ``1 +- noise`` (``phase``: fraction of a period to shift by)."""
        rnd = random.Random(seed)
        times, rps = [], []
        for i in range(max(1, math.ceil(span_s / step_s))):
            t = i * step_s
            wave = 0.5 - 0.5 * math.cos(2 * math.pi * (t / period_s + phase))
            times.append(t)
            rps.append((low + (peak - low) * wave) * (1 + noise * (2 * rnd.random() - 1)))
        return cls(tuple(times), tuple(rps))

    def at(self, t: float) -> float:
        """The rate offered at ``t``."""
        return self.rps[max(0, bisect.bisect_right(self.times, t) - 1)]

    def pieces(self, t0: float, t1: float) -> list[tuple[float, float]]:
        """``(seconds, rps)`` of each constant piece of ``[t0, t1)``."""
        out = []
        i = max(0, bisect.bisect_right(self.times, t0) - 1)
        t = t0
        while t < t1 - 1e-12:
            end = self.times[i + 1] if i + 1 < len(self.times) else math.inf
            stop = min(end, t1)
            out.append((stop - t, self.rps[i]))
            t, i = stop, i + 1
        return out

    @property
    def peak(self) -> float:
        """The highest rate offered."""
        return max(self.rps)


@dataclass(frozen=True)
class LatencyCurve:
    """One replica's request p99 (ms) against its offered load (req/s): see the module doc.

    Attributes:
        rps: measured loads, increasing.
        p99_ms: the p99 measured at each.
        capacity: the highest load per replica that meets the ceiling (above: unbounded).
    """

    rps: tuple[float, ...]
    p99_ms: tuple[float, ...]
    capacity: float

    def __post_init__(self) -> None:
        if len(self.rps) != len(self.p99_ms) or not self.rps:
            raise ValueError("a latency curve needs one p99 per load")
        if any(b <= a for a, b in zip(self.rps, self.rps[1:], strict=False)):
            raise ValueError("latency curve loads must increase")
        if self.capacity <= 0:
            raise ValueError(f"capacity must be > 0, got {self.capacity}")
        # the monotone envelope (a running maximum): a higher load never reads faster
        env, top = [], 0.0
        for v in self.p99_ms:
            top = max(top, v)
            env.append(top)
        object.__setattr__(self, "_env", tuple(env))

    @classmethod
    def measured(cls, model: str = "gpt", path: Path = SERVING_RESULTS) -> LatencyCurve:
        """The dynamic-batching curve of ``model`` in the serving benchmark's results."""
        data = json.loads(path.read_text())["models"][model]
        pts = sorted((p["rps"], p["dynamic_p99_ms"]) for p in data["tail_against_load"])
        return cls(
            tuple(r for r, _ in pts),
            tuple(v for _, v in pts),
            float(data["best"]["dynamic"]["rps"]),
        )

    def p99(self, load: float) -> float:
        """The p99 one replica gives at ``load`` req/s (``inf`` past its capacity)."""
        if load > self.capacity * (1 + 1e-9):
            return math.inf
        env: tuple[float, ...] = self._env  # type: ignore[attr-defined]
        xs = self.rps
        if load <= xs[0]:
            return env[0]
        i = bisect.bisect_left(xs, load)
        if i >= len(xs):
            return env[-1]
        x0, x1 = xs[i - 1], xs[i]
        return env[i - 1] + (env[i] - env[i - 1]) * (load - x0) / (x1 - x0)

    def busy(self, load: float) -> float:
        """A replica's busy share at ``load`` req/s."""
        return min(1.0, load / self.capacity)


@dataclass(frozen=True)
class ServiceSpec:
    """A simulated service (its trace row gives name, submission, team and GPU range).

    Attributes:
        load: the offered load, on the simulation's clock.
        curve: one replica's latency model.
        max_ms: the SLA's ceiling on the request percentile.
        duration: seconds it serves, then it ends.
        percentile: the SLA's percentile (the curve is a p99 curve).
        scale: whether the SLA guard scales it (``False``: a fixed replica count).
        startup_s: seconds a start leaves it serving nothing, and a new replica takes to
            serve (``None``: the simulator's ``restart_s``).
        in_place: resized in place, as a service with an endpoint is live (``serve.endpoint``,
            the default): the replicas that stay serve throughout, a scale-up's new ones
            after ``startup_s``, a scale-down's leave at once. ``False``: a resize relaunches
            every replica (``serve.endpoint: false``), which serve nothing for ``startup_s``.
    """

    load: LoadProfile
    curve: LatencyCurve
    max_ms: float
    duration: float
    percentile: int = 99
    scale: bool = True
    startup_s: float | None = None
    in_place: bool = True


def peak_replicas(spec: ServiceSpec, cfg: ReplicaConfig | None = None) -> int:
    """Replicas that carry the service's peak load at the guard's ``target_util`` busy share:
    what a dedicated partition is sized to."""
    util = (cfg or ReplicaConfig()).target_util
    return max(1, math.ceil(spec.load.peak / (spec.curve.capacity * util) - 1e-9))


class ServiceJobModel(JobModel):
    """A service's progress: seconds served, whatever its replicas (it ends after
    ``duration`` seconds of serving; its speed is its latency, not its progress)."""

    speedup_changes = False

    def __init__(self, spec: ServiceSpec) -> None:
        self.spec = spec
        self.done = 0.0

    def start_s(self, default: float) -> float:
        """Seconds a start or resize costs it (as ``WallClockJobModel.start_s``)."""
        return default if self.spec.startup_s is None else self.spec.startup_s

    def advance(self, placement: tuple[int, ...], seconds: float) -> float | None:
        """See :meth:`JobModel.advance`."""
        left = self.spec.duration - self.done
        if seconds >= left - 1e-9:
            self.done = self.spec.duration
            return left
        self.done += seconds
        return None

    def state(self) -> tuple[float, int]:
        """See :meth:`JobModel.state` (nothing is lost on a stop)."""
        return (self.done, 0)

    def restore(self, state: tuple[float, int]) -> None:
        """See :meth:`JobModel.restore`."""
        self.done = state[0]

    def speedup(self, max_gpus: int) -> tuple[float, ...]:
        """See :meth:`JobModel.speedup`: a service is not elastic work."""
        return ()

    def remaining_time(self, placement: tuple[int, ...]) -> float:
        """See :meth:`JobModel.remaining_time`."""
        return self.spec.duration - self.done

    @property
    def fraction_done(self) -> float:
        """See :attr:`JobModel.fraction_done`."""
        return self.done / self.spec.duration


@dataclass
class ServiceStats:
    """What one service did over a run (see the module doc).

    Attributes:
        life_s: seconds from submission to its end (or the run's end).
        met_s: seconds of them within the SLA.
        gpu_s: GPU-seconds its replicas held.
        offered: requests offered over its life.
        windows: ``(time, offered rps, replicas, p99 ms)`` per window (a round's interval).
        scales: ``(time, replicas asked, reason)`` of every scaling decision that changed
            what it asks for.
    """

    life_s: float = 0.0
    met_s: float = 0.0
    gpu_s: float = 0.0
    offered: float = 0.0
    windows: list[tuple[float, float, int, float]] = field(default_factory=list)
    scales: list[tuple[float, int, str]] = field(default_factory=list)

    @property
    def attainment(self) -> float:
        """Share of its life within the SLA (NaN: no life yet)."""
        return self.met_s / self.life_s if self.life_s else math.nan


@dataclass
class _Window:
    """The last window of a running service, as the guard's reading takes it."""

    at: float = 0.0
    seconds: float = 0.0
    offered: float = 0.0  # requests
    served: float = 0.0
    busy_s: float = 0.0  # busy share x seconds, per replica
    p99: float = 0.0


class Services:
    """The simulator's services: latency per window, scaling per round (see the module doc).

    Args:
        specs: a :class:`ServiceSpec` per service job name.
        config: the scaling thresholds (default: the live guard's, ``hold_s`` 10 s).
    """

    def __init__(self, specs: Mapping[str, ServiceSpec], config: ReplicaConfig | None = None):
        self.specs = dict(specs)
        self.config = config or ReplicaConfig(up_hold_s=10.0, down_hold_s=20.0)
        self.stats = {name: ServiceStats() for name in self.specs}
        self.want: dict[str, int] = {}
        self._watch: dict[str, ScaleWatch] = {}
        self._last: dict[str, _Window] = {}

    def __bool__(self) -> bool:
        return bool(self.specs)

    def model(self, name: str) -> ServiceJobModel:
        """The job model of service ``name``."""
        return ServiceJobModel(self.specs[name])

    def window(
        self,
        name: str,
        t0: float,
        dt: float,
        replicas: int,
        down_s: float,
        left_s: float,
        warm: tuple[float, int] = (0.0, 0),
    ) -> None:
        """Account for ``[t0, t0 + dt)`` of service ``name``: ``replicas`` GPUs held (0:
        queued), the first ``down_s`` seconds starting (serving nothing), ``left_s`` seconds
        of serving left before it ends (of the time after ``down_s``); ``warm``: for its
        first seconds only this many replicas serve (a scale-up in place, the new replicas
        loading)."""
        spec, st = self.specs[name], self.stats[name]
        live = min(dt, down_s + left_s)
        w = _Window(at=t0 + live)
        t, worst = t0, 0.0
        warm_s, warm_n = warm
        for secs, rps in spec.load.pieces(t0, t0 + live):
            down = min(secs, max(0.0, down_s - (t - t0))) if replicas else secs
            w.offered += rps * secs
            if down > 0 and rps > 0:
                worst = math.inf
            elif rps == 0:
                st.met_s += down
            # the seconds served: first by the warm replicas alone, then by all
            few = min(secs - down, max(0.0, warm_s - (t + down - t0))) if warm_n else 0.0
            for up, n in ((few, warm_n), (secs - down - few, replicas)):
                if up <= 0:
                    continue
                per = rps / n
                p99 = spec.curve.p99(per)
                worst = max(worst, p99)
                w.served += min(rps, spec.curve.capacity * n) * up
                w.busy_s += spec.curve.busy(per) * up * n / replicas
                if p99 <= spec.max_ms:
                    st.met_s += up
            t += secs
        w.seconds = live
        w.p99 = worst
        st.life_s += live
        st.gpu_s += replicas * live
        st.offered += w.offered
        st.windows.append((t0, w.offered / live if live else 0.0, replicas, worst))
        if replicas:
            self._last[name] = w

    def scale(
        self,
        name: str,
        now: float,
        replicas: int,
        lo: int,
        hi: int,
        room: int | None,
        stream: tuple[float, float] | None = None,
    ) -> bool:
        """One round of the guard's decision for a running service; whether what it asks for
        changed (the caller rebuilds its view). ``stream``: seconds of its stream left and
        seconds a relaunch leaves it unanswered (the live guard's ``time_left_s`` and
        ``relaunch_s``; ``None``: unknown)."""
        spec = self.specs[name]
        if not spec.scale:
            return False
        before = self.want.get(name, 0)
        if before and before == replicas:  # the resize it asked for is done
            self.want.pop(name)
        w = self._last.get(name)
        if w is None or w.seconds <= 0:
            return before != self.want.get(name, 0)
        reading = ServiceReading(
            at=now,
            requests=int(w.served),
            latency_ms=w.p99 if math.isfinite(w.p99) else 1e9,
            offered_rps=w.offered / w.seconds,
            served_rps=w.served / w.seconds,
            busy=w.busy_s / w.seconds,  # per second of the window, starts included
            time_left_s=None if stream is None else stream[0],
        )
        relaunch = None if stream is None else stream[1]
        limits = ServiceLimits(replicas, lo, hi, room, spec.percentile, spec.max_ms, relaunch)
        watch, scale = _scale(limits, reading, self._watch.get(name, ScaleWatch()), self.config)
        self._watch[name] = watch
        if scale is not None and scale.replicas not in (replicas, self.want.get(name)):
            self.want[name] = scale.replicas
            self.stats[name].scales.append((now, scale.replicas, scale.reason))
        return before != self.want.get(name, 0)

    # ---- the simulator's hooks (``Simulator`` calls these while a service is in the run) ----

    def active(self, queued: Collection[str], running: Collection[str]) -> bool:
        """Whether a service is queued or running (its load needs every round)."""
        specs = self.specs
        return any(n in specs for n in running) or any(n in specs for n in queued)

    def serve(self, jobs: Mapping[str, SimJob], now: float, dt: float) -> None:
        """Account the services' next ``dt`` seconds from ``now`` (before the jobs advance)."""
        for name in self.specs:
            job = jobs[name]
            if job.state == RUNNING and job.completed_at is None:
                left = job.model.remaining_time(job.placement)
                warm = (job.warm_left, job.warm_replicas)
                self.window(name, now, dt, len(job.nodes), job.restart_left, left, warm)
                job.warm_left = max(0.0, job.warm_left - dt)
            elif job.state == QUEUED:
                self.window(name, now, dt, 0, dt, 0.0)

    def scale_running(
        self,
        jobs: Mapping[str, SimJob],
        running: Mapping[str, SimJob],
        teams: Sequence[TeamView],
        now: float,
        restart_s: float = 0.0,
    ) -> None:
        """The guard's decision for each running service; a service whose ask changed has
        its view rebuilt (the snapshot's ``want_gpus``). As live, the guard knows how much of
        the service's stream is left and what a relaunch costs it (its start, ``restart_s``
        unless its spec says)."""
        caps = {t.name: t.max_gpus for t in teams}
        held = [(j.team, len(j.nodes)) for j in running.values()]
        for name in self.specs:
            job = jobs[name]
            if job.state != RUNNING:
                continue
            s = job.spec
            room = quota_room(job.team, caps.get(job.team, 0), held)
            model = job.model
            stream = None
            if isinstance(model, ServiceJobModel):  # in place: no gap (as the live guard)
                cost = 0.0 if model.spec.in_place else model.start_s(restart_s)
                stream = (model.remaining_time(()), cost)  # any placement
            if self.scale(name, now, len(job.nodes), s.lo, s.hi, room, stream):
                job.view = None

    def summary(self) -> dict[str, float]:
        """Over every service: SLA attainment (time-weighted), GPU-seconds, requests offered."""
        life = sum(s.life_s for s in self.stats.values())
        met = sum(s.met_s for s in self.stats.values())
        return {
            "service_attainment": met / life if life else math.nan,
            "service_gpu_s": sum(s.gpu_s for s in self.stats.values()),
            "service_requests": sum(s.offered for s in self.stats.values()),
            "service_scales": float(sum(len(s.scales) for s in self.stats.values())),
        }


def quota_room(team: str, cap: int, held: Sequence[tuple[str, int]]) -> int | None:
    """GPUs a team capped at ``cap`` (0: no cap) may still take, by ``(team, GPUs)`` held."""
    if cap <= 0:
        return None
    return cap - sum(g for t, g in held if t == team)
