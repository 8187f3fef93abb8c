"""The SLA guard's judgement: is a running job keeping its SLA, and what should be done.

Pure (no Redis, no Ray): the control loop feeds it, each round, every running job's latest
report over the worker's sliding window (:class:`workers.window.RecentSteps`: the steps of the
last 30 s) and acts on what it returns (:meth:`ControlLoop.guard`). Four checks:

* ``latency``: the window's percentile of the SLA over its ceiling (violated);
* ``throughput``: the window's samples/s (or tokens/s) under the SLA's floor (violated);
* ``deadline``: the work left, at the window's rate, ends after the deadline (at risk; violated
  once the deadline has passed);
* ``profile``: the window's rate more than ``prediction_margin`` under what the tuner
  predicted for the settings and GPU count the run has, or its latency that far over the
  prediction (``profile-drift``: the measurements contradict the profile the settings were
  chosen by; that alone says nothing of the SLA).

Hysteresis, so that noise causes nothing: a check trips only after its figure has been out of
bounds for ``hold_s`` without a break, and clears only after it has been back inside by the
``band`` (a fraction of the target) for ``hold_s``; in between nothing changes. A window of
fewer than ``min_steps`` steps is not judged. What follows a trip (:func:`actions`): an elastic
bulk job whose floor or deadline is tripped is *urgent* (the scheduling policy grows it first,
``RunningJob.urgent``). The guard acts on the SLA, not on the tuner's pride: a tuned job is
re-tuned from the measured data (at most ``max_retunes`` times) only when its SLA is at risk
(a latency, throughput or deadline check tripped) *and* its profile is contradicted (the
settings were chosen on figures the job does not show, so a re-tune from what it does show may
find better ones). A job meeting its SLA is never stopped, however far from its profile: the
profile is corrected from the measurements instead (the loop's business, an event and the
stored profile).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from orchestrator.sla import wall_share

__all__ = [
    "GUARD_KEYS",
    "SLA_CHECKS",
    "Actions",
    "Check",
    "Finding",
    "GuardConfig",
    "Reading",
    "Targets",
    "Watch",
    "actions",
    "assess",
    "reading_of",
]

GUARD_KEYS: tuple[str, ...] = (
    "first_step_at",
    "window_p50_ms",
    "window_p95_ms",
    "window_p99_ms",
    "window_samples_per_s",
    "window_steps",
    "step",
    "total_steps",
    "global_batch",
    "tokens_per_s",
    "samples_per_s",
    "reads_dataset",
    "data_wait_share",
)
"""The worker's report fields the guard reads for each running job."""


class Check(enum.Enum):
    """What the guard compares."""

    LATENCY = "latency"
    THROUGHPUT = "throughput"
    DEADLINE = "deadline"
    PROFILE = "profile"


@dataclass(frozen=True)
class GuardConfig:
    """The guard's thresholds.

    Attributes:
        min_steps: a window with fewer measured steps is not judged.
        hold_s: seconds a figure must stay out of bounds before its check trips, and back
            inside (by ``band``) before it clears.
        band: the hysteresis band, a fraction of the target (a floor of 100 clears at 105).
        prediction_margin: how far under the tuner's predicted rate (or over its predicted
            latency), as a fraction, contradicts the profile.
        max_retunes: re-tunes a job may get from the guard, in its whole life.
    """

    min_steps: int = 10
    hold_s: float = 10.0
    band: float = 0.05
    prediction_margin: float = 0.25
    max_retunes: int = 1


@dataclass(frozen=True)
class Targets:
    """What a run is held to: its SLA and the tuner's prediction for its settings.

    Attributes:
        percentile, max_ms: the latency SLA (``None``: none).
        floor: the throughput floor, in ``floor_unit`` per second (``None``: none).
        floor_unit: ``"samples"`` or ``"tokens"``.
        deadline_at: when its work is due (absolute; ``None``: no deadline).
        predicted_rate: samples/s the tuner predicted at the run's GPU count (``None``: the job
            was not tuned, or the run is on a size the profile says nothing of).
        predicted_ms: the tuner's predicted latency at that percentile (``None``: none).
        elastic: whether the job may grow (a bulk job with a GPU range).
        tuned: whether it runs tuned settings (only those can be re-tuned).
    """

    percentile: int | None = None
    max_ms: float | None = None
    floor: float | None = None
    floor_unit: str = "samples"
    deadline_at: float | None = None
    predicted_rate: float | None = None
    predicted_ms: float | None = None
    elastic: bool = False
    tuned: bool = False


@dataclass(frozen=True)
class Reading:
    """One report of a running job, as the guard reads it.

    Attributes:
        at: the round's clock.
        steps: measured steps in the window.
        latency_ms: the window's latency at the SLA's (or prediction's) percentile.
        samples_per_s, tokens_per_s: the window's throughput (its steps' own rate).
        remaining_samples: work left (steps left x global batch; ``None``: unknown).
        wait_share: the share of the run's time it waits for its own data
            (``orchestrator.sla.wall_share``; ``None``: none counted). The SLA checks judge
            the rate at the wall clock, ``x (1 - wait_share)``; the profile check the steps'
            own rate, which is what the tuner predicted.
    """

    at: float
    steps: int
    latency_ms: float | None = None
    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    remaining_samples: float | None = None
    wait_share: float | None = None

    def wall(self, rate: float | None) -> float | None:
        """``rate`` at the wall clock (see ``wait_share``)."""
        if rate is None or self.wait_share is None:
            return rate
        return rate * (1.0 - self.wait_share)


@dataclass(frozen=True)
class Finding:
    """A check that tripped or cleared in this round.

    Attributes:
        check: which.
        tripped: ``True``: it tripped; ``False``: it cleared.
        severity: ``"violated"`` or ``"at-risk"`` of an SLA check's trip, ``"drift"`` of the
            profile's; ``"recovered"`` when cleared.
        measured, target: the figures in words, for the event and ``orch show``.
    """

    check: Check
    tripped: bool
    severity: str
    measured: str
    target: str

    def describe(self) -> str:
        """``"sla-violated: throughput 41.0 samples/s (target >= 50 samples/s)"``, or for the
        profile ``"profile-drift: 140.0 samples/s (profile: 200.0 predicted)"``."""
        if self.check is Check.PROFILE:
            return f"profile-{self.severity}: {self.measured} (profile: {self.target})"
        return f"sla-{self.severity}: {self.check.value} {self.measured} (target {self.target})"


@dataclass(frozen=True)
class Watch:
    """A run's hysteresis state: since when each check has been out of bounds, or back
    inside the band, and which checks are tripped."""

    out_since: dict[Check, float] = field(default_factory=dict)
    in_since: dict[Check, float] = field(default_factory=dict)
    tripped: frozenset[Check] = frozenset()


def reading_of(report: dict[str, Any], targets: Targets, now: float) -> Reading:
    """A :class:`Reading` from a worker's latest report (``GUARD_KEYS``)."""

    def num(key: str) -> float | None:
        v = report.get(key)
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

    pct = targets.percentile or 95
    rate = num("window_samples_per_s")
    tokens = None
    sps, tps = num("samples_per_s"), num("tokens_per_s")
    if rate is not None and sps and tps:  # the run's tokens per sample, times the window rate
        tokens = rate * tps / sps
    total, step, batch = num("total_steps"), num("step"), num("global_batch")
    left = (total - step) * batch if total and step is not None and batch else None
    return Reading(
        now,
        int(num("window_steps") or 0),
        num(f"window_p{pct}_ms"),
        rate,
        tokens,
        None if left is None else max(0.0, left),
        wall_share(report),
    )


def _status(check: Check, t: Targets, r: Reading, band: float, margin: float) -> _Status | None:
    """Where a reading stands on one check: out of bounds, inside the band, or between;
    ``None`` when the check does not apply or cannot be judged from this reading."""
    if check is Check.LATENCY:
        if t.max_ms is None or r.latency_ms is None:
            return None
        v, cap = r.latency_ms, t.max_ms
        return _Status(
            v > cap,
            v <= cap * (1 - band),
            "violated",
            f"p{t.percentile} {v:.1f} ms",
            f"p{t.percentile} <= {cap:g} ms",
        )
    if check is Check.THROUGHPUT:
        rate = r.wall(r.tokens_per_s if t.floor_unit == "tokens" else r.samples_per_s)
        if t.floor is None or rate is None:
            return None
        unit = f"{t.floor_unit}/s"
        return _Status(
            rate < t.floor,
            rate >= t.floor * (1 + band),
            "violated",
            f"{rate:,.1f} {unit}",
            f">= {t.floor:g} {unit}",
        )
    if check is Check.DEADLINE:
        wall = r.wall(r.samples_per_s)
        if t.deadline_at is None or r.remaining_samples is None or not wall:
            return None
        left_s = r.remaining_samples / wall
        end = r.at + left_s
        severity = "violated" if r.at > t.deadline_at else "at-risk"
        return _Status(
            end > t.deadline_at,
            end <= t.deadline_at - band * left_s,
            severity,
            f"ends in {left_s:,.0f} s at {wall:,.1f} samples/s",
            f"due in {t.deadline_at - r.at:,.0f} s",
        )
    # PROFILE: the rate against the prediction, and the latency when one was predicted
    outs, ins, said = [], [], []
    if t.predicted_rate and r.samples_per_s is not None:
        outs.append(r.samples_per_s < t.predicted_rate * (1 - margin))
        ins.append(r.samples_per_s >= t.predicted_rate * (1 - margin / 2))
        said.append((f"{r.samples_per_s:,.1f} samples/s", f"{t.predicted_rate:,.1f} predicted"))
    if t.predicted_ms and r.latency_ms is not None and t.max_ms is not None:
        outs.append(r.latency_ms > t.predicted_ms * (1 + margin))
        ins.append(r.latency_ms <= t.predicted_ms * (1 + margin / 2))
        said.append((f"{r.latency_ms:.1f} ms", f"{t.predicted_ms:.1f} ms predicted"))
    if not outs:
        return None
    return _Status(
        any(outs),
        all(ins),
        "drift",
        ", ".join(m for m, _ in said),
        ", ".join(p for _, p in said),
    )


@dataclass(frozen=True)
class _Status:
    out: bool  # out of bounds
    inside: bool  # inside by the band
    severity: str
    measured: str
    target: str


def assess(
    targets: Targets, reading: Reading, watch: Watch, cfg: GuardConfig
) -> tuple[Watch, list[Finding]]:
    """One round of the guard for one run: its new hysteresis state and what tripped or
    cleared (see the module doc)."""
    if reading.steps < cfg.min_steps:
        return watch, []
    now = reading.at
    out_since, in_since = dict(watch.out_since), dict(watch.in_since)
    tripped = set(watch.tripped)
    findings: list[Finding] = []
    for check in Check:
        s = _status(check, targets, reading, cfg.band, cfg.prediction_margin)
        if s is None:
            continue
        if s.out:
            in_since.pop(check, None)
            since = out_since.setdefault(check, now)
            if check not in tripped and now - since >= cfg.hold_s:
                tripped.add(check)
                findings.append(Finding(check, True, s.severity, s.measured, s.target))
        elif s.inside:
            out_since.pop(check, None)
            since = in_since.setdefault(check, now)
            if check in tripped and now - since >= cfg.hold_s:
                tripped.discard(check)
                findings.append(Finding(check, False, "recovered", s.measured, s.target))
        else:  # between the bound and the band: neither trips nor clears
            out_since.pop(check, None)
            in_since.pop(check, None)
    return Watch(out_since, in_since, frozenset(tripped)), findings


@dataclass(frozen=True)
class Actions:
    """What the loop does about a run's tripped checks.

    Attributes:
        urgent: the policy should grow it first (an elastic bulk job short of its floor or
            its deadline).
        retune: re-tune it from the measured data and restart it with the new settings.
        note: why a tripped ``profile`` check leads to no re-tune (empty otherwise).
    """

    urgent: bool = False
    retune: bool = False
    note: str = ""


SLA_CHECKS = frozenset({Check.LATENCY, Check.THROUGHPUT, Check.DEADLINE})
"""The checks of the SLA itself (``profile`` is about the tuner's prediction)."""


def actions(targets: Targets, watch: Watch, retunes: int, cfg: GuardConfig) -> Actions:
    """The actions a run's tripped checks call for (see the module doc)."""
    urgent = targets.elastic and bool(watch.tripped & {Check.THROUGHPUT, Check.DEADLINE})
    if Check.PROFILE not in watch.tripped:
        return Actions(urgent)
    if not watch.tripped & SLA_CHECKS:
        return Actions(urgent, note="not re-tuned: it meets its SLA; its profile is corrected")
    if not targets.tuned:
        return Actions(urgent, note="not re-tuned: the job runs untuned settings")
    if retunes >= cfg.max_retunes:
        return Actions(urgent, note=f"not re-tuned: it had its {cfg.max_retunes} re-tune(s)")
    return Actions(urgent, retune=True)
