"""What a simulation measures: per-job records, pool usage, and the summary figures."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from policies.sharing import entitlements
from policies.snapshot import TeamView


@dataclass(frozen=True)
class SimOutcome:
    """One job's outcome. Times are simulated seconds; ``None``: never happened."""

    name: str
    job_class: str
    team: str
    gpus: int
    submit_time: float
    first_start: float | None
    completed_at: float | None
    deadline: float | None
    wait_target: float
    preemptions: int
    resizes: int
    lost_gpu_s: float
    waits: tuple[float, ...]
    """Seconds of every wait: submission to first start, then each preemption to the next
    start; a wait still open when the run ended (preempted, not resumed) counts up to the end."""
    preempt_lost_gpu_s: float = 0.0
    """GPU-seconds preemptions cost this job: work since its checkpoint, plus the restart
    cost of resuming on the GPUs it held (``lost_gpu_s`` also counts resizes)."""

    @property
    def jct(self) -> float | None:
        """Job completion time: completion - submission."""
        return None if self.completed_at is None else self.completed_at - self.submit_time

    @property
    def wait(self) -> float | None:
        """Seconds from submission to first start."""
        return None if self.first_start is None else self.first_start - self.submit_time

    @property
    def waits_met(self) -> bool:
        """Whether the job started and every one of its waits was within ``wait_target``."""
        return self.first_start is not None and all(
            w <= self.wait_target + 1e-9 for w in self.waits
        )


@dataclass
class Usage:
    """GPU usage integrated over simulated time (updated by the simulator every interval)."""

    total_gpus: int
    time: float = 0.0
    held_gpu_s: float = 0.0
    restart_gpu_s: float = 0.0
    busy_time: float = 0.0  # time while demand >= supply
    busy_held_gpu_s: float = 0.0
    timeline: list[tuple[float, int]] = field(default_factory=list)
    """``(time, GPUs held from then on)``, one entry each time the count changes."""
    team_held: dict[str, float] = field(default_factory=dict)
    team_entitled: dict[str, float] = field(default_factory=dict)
    _entitled: dict[str, int] = field(default_factory=dict)
    _entitled_for: tuple[object, ...] = ()

    def add(
        self, dt: float, held: int, restart_gpu_s: float, demand: int, teams: dict[str, int]
    ) -> None:
        """Account for ``dt`` seconds with ``held`` GPUs allocated and ``demand`` asked for."""
        if not self.timeline or self.timeline[-1][1] != held:
            self.timeline.append((self.time, held))
        self.time += dt
        self.held_gpu_s += held * dt
        self.restart_gpu_s += restart_gpu_s
        if demand >= self.total_gpus:
            self.busy_time += dt
            self.busy_held_gpu_s += held * dt
        for team, gpus in teams.items():
            self.team_held[team] = self.team_held.get(team, 0.0) + gpus * dt
        for team, gpus in self._entitled.items():
            self.team_entitled[team] = self.team_entitled.get(team, 0.0) + gpus * dt

    def note_entitlement(
        self, demand: Mapping[str, int], teams: Sequence[TeamView], total: int
    ) -> None:
        """Record each team's entitlement for the coming interval.

        Args:
            demand: GPUs per team now: its queued jobs' ``lo``, its running jobs'
                ``max(gpus, lo)``.
            teams: the team config.
            total: GPUs in the pool.
        """
        key = (dict(demand), teams, total)
        if key != self._entitled_for:  # same demand, same entitlement: skip the water-filling
            self._entitled_for = key
            self._entitled = entitlements(demand, teams, total)


@dataclass
class SimResult:
    """The outcome of one simulation."""

    records: list[SimOutcome]
    usage: Usage
    rounds: int
    end_time: float
    wall_s: float
    decision_s: list[tuple[int, float]]

    def summary(self) -> dict[str, float]:
        """The headline figures (see :func:`summarize`)."""
        return summarize(self.records, self.usage)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100), nearest-rank; NaN for no values."""
    if not values:
        return math.nan
    s = sorted(values)
    k = max(0, math.ceil(q / 100 * len(s)) - 1)
    return s[k]


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index of ``values``: 1 when all equal, 1/n when one takes all."""
    if not values:
        return math.nan
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values) or 1.0)


def summarize(records: Sequence[SimOutcome], usage: Usage) -> dict[str, float]:
    """JCT, attainment, utilisation, fairness and preemption cost of a run.

    * ``mean_jct``, ``median_jct``, ``p95_jct``: over every completed job, both classes;
      ``bulk_mean_jct``, ``bulk_p99_jct``: bulk jobs only.
    * ``makespan``: first submission to last completion (completed jobs).
    * ``interactive_attainment``: interactive jobs whose every wait (for the first start, and
      for the restart after each preemption) was within their wait target.
    * ``deadline_attainment``: bulk jobs with a deadline that completed by it.
    * ``utilisation``: allocated GPU-time / pool GPU-time; ``busy_utilisation`` the same over
      the time when demand (GPUs asked for by queued and running jobs: their requested
      ``gpus``, whatever an elastic policy gave them) was at least the pool.
    * ``gpu_hours_lost``: work lost since checkpoints (preemptions and resizes) plus the GPU
      time of every restart (first starts included); ``preemption_gpu_hours_lost``: the part
      preemptions cause (lost work and the resume's restart).
    * ``jain``: Jain's index over teams of (GPU-time held / GPU-time entitled), teams with an
      entitlement only; entitlement = guarantee, then weighted max-min share of the rest.
    """
    ends = [r.completed_at for r in records if r.completed_at is not None]
    jcts = [j for j in (r.jct for r in records) if j is not None]
    bulk = [r.jct for r in records if r.job_class == "bulk" and r.jct is not None]
    inter = [r for r in records if r.job_class == "interactive"]
    met = [r for r in inter if r.waits_met]
    with_deadline = [r for r in records if r.job_class == "bulk" and r.deadline is not None]
    on_time = [
        r
        for r in with_deadline
        if r.completed_at is not None and r.deadline is not None and r.completed_at <= r.deadline
    ]
    ratios = [usage.team_held.get(t, 0.0) / e for t, e in usage.team_entitled.items() if e > 0]
    pool_s = usage.total_gpus * usage.time
    return {
        "jobs": float(len(records)),
        "completed": float(len(ends)),
        "mean_jct": sum(jcts) / len(jcts) if jcts else math.nan,
        "median_jct": statistics.median(jcts) if jcts else math.nan,
        "p95_jct": percentile(jcts, 95),
        "makespan": max(ends) - min(r.submit_time for r in records) if ends else math.nan,
        "bulk_mean_jct": sum(bulk) / len(bulk) if bulk else math.nan,
        "bulk_p99_jct": percentile(bulk, 99),
        "interactive_attainment": len(met) / len(inter) if inter else math.nan,
        "deadline_attainment": len(on_time) / len(with_deadline) if with_deadline else math.nan,
        "utilisation": usage.held_gpu_s / pool_s if pool_s else math.nan,
        "busy_utilisation": (
            usage.busy_held_gpu_s / (usage.total_gpus * usage.busy_time)
            if usage.busy_time
            else math.nan
        ),
        "jain": jain(ratios),
        "preemptions": float(sum(r.preemptions for r in records)),
        "resizes": float(sum(r.resizes for r in records)),
        "gpu_hours_lost": sum(r.lost_gpu_s for r in records) / 3600 + usage.restart_gpu_s / 3600,
        "preemption_gpu_hours_lost": sum(r.preempt_lost_gpu_s for r in records) / 3600,
    }
