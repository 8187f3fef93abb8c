"""The SLA as an optimisation problem: one objective value and named constraints per trial.

- Throughput SLA (a floor, or work by a deadline): among configs whose throughput meets the
  floor, the lowest cost, in GPU-seconds per sample (``gpus / samples_per_s``). Minimised.
- Latency SLA (a ceiling on a percentile of step time): the highest throughput among configs
  whose percentile meets the ceiling. Maximised. A stated throughput floor is a second
  constraint.

Constraints follow Optuna's convention (``trial.set_constraint``): a value <= 0 is satisfied.
Each is normalised by its target (``(measured - ceiling) / ceiling``) so violations of different
units add up to one "how far from feasible" figure, which picks the closest config when none
is feasible. A trial that did not run (out of memory, a crash) violates ``runs``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from orchestrator.spec import JobSpec
    from orchestrator.tuner.space import Config

__all__ = ["FAILED_COST", "Goal", "Measurement", "Verdict"]

Status = Literal["ok", "oom", "error"]

FAILED_COST = 1e12
"""Objective value of a failed trial under a cost goal (Optuna needs a finite value; the
``runs`` constraint already marks it infeasible, this only keeps it last in every ranking)."""


@dataclass(frozen=True)
class Measurement:
    """What one profiling trial measured (or why it could not).

    Attributes:
        status: ``ok``; ``oom`` (out of memory: larger micro-batches will not fit either);
            ``error`` (any other crash).
        p50_ms, p95_ms, p99_ms: step latency percentiles over the measured steps.
        samples_per_s, tokens_per_s: throughput over all GPUs (tokens only for token models).
        peak_mem_mb: peak memory of one worker.
        cost_s: profiling seconds the trial cost (GPU-seconds are ``cost_s * gpus``).
        message: why it failed, for ``error``/``oom``.
    """

    status: Status
    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    peak_mem_mb: float | None = None
    cost_s: float = 0.0
    message: str = ""

    @property
    def ok(self) -> bool:
        """Whether the trial ran and measured."""
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (the inverse of :meth:`from_dict`)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        """Rebuild a measurement from :meth:`to_dict` output."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class Verdict:
    """A trial judged against the SLA.

    Attributes:
        value: the objective (cost to minimise, or throughput to maximise).
        constraints: name -> normalised violation (<= 0 satisfied).
        feasible: every constraint satisfied.
        violation: sum of the positive constraint values (0 when feasible).
        reason: why it is infeasible, in words (empty when feasible).
    """

    value: float
    constraints: dict[str, float]
    feasible: bool
    violation: float
    reason: str


@dataclass(frozen=True)
class Goal:
    """One job's SLA as an objective with constraints.

    Attributes:
        kind: ``throughput`` (minimise cost under a floor) or ``latency`` (maximise
            throughput under a ceiling).
        metric: the throughput measure, ``samples_per_s`` or ``tokens_per_s``.
        floor: minimum throughput in ``metric`` units, if any.
        ceiling_ms: maximum latency, if any.
        percentile: which step-latency percentile the ceiling applies to.
    """

    kind: Literal["throughput", "latency"]
    metric: Literal["samples_per_s", "tokens_per_s"] = "samples_per_s"
    floor: float | None = None
    ceiling_ms: float | None = None
    percentile: int = 95

    @classmethod
    def from_spec(cls, spec: JobSpec) -> Goal:
        """The goal of a job: latency when it states a ceiling, else throughput.

        Work by a deadline becomes the floor ``work / deadline`` (the rate that finishes on time
        if the job starts at once; queueing time is the scheduler's business).
        """
        tp, lat = spec.sla.throughput, spec.sla.latency
        metric: Literal["samples_per_s", "tokens_per_s"] = "samples_per_s"
        floor: float | None = None
        if tp is not None:
            if tp.min_samples_per_s is not None:
                floor = tp.min_samples_per_s
            elif tp.min_tokens_per_s is not None:
                metric, floor = "tokens_per_s", tp.min_tokens_per_s
            elif tp.deadline_s is not None and tp.work_samples is not None:
                floor = tp.work_samples / tp.deadline_s
            elif tp.deadline_s is not None and tp.work_tokens is not None:
                metric, floor = "tokens_per_s", tp.work_tokens / tp.deadline_s
        if lat is not None:
            return cls("latency", metric, floor, lat.max_ms, lat.percentile)
        return cls("throughput", metric, floor)

    @property
    def direction(self) -> Literal["minimize", "maximize"]:
        """Optuna's study direction for :attr:`Verdict.value`."""
        return "minimize" if self.kind == "throughput" else "maximize"

    def describe(self) -> str:
        """The goal in words: ``min GPU-s/sample with >= 500 samples/s``."""
        unit = "samples/s" if self.metric == "samples_per_s" else "tokens/s"
        parts = []
        if self.floor is not None:
            parts.append(f">= {self.floor:g} {unit}")
        if self.ceiling_ms is not None:
            parts.append(f"p{self.percentile} <= {self.ceiling_ms:g} ms")
        head = "min GPU-s per sample" if self.kind == "throughput" else f"max {unit}"
        return f"{head} with {' and '.join(parts)}" if parts else head

    def rate(self, m: Measurement) -> float | None:
        """The throughput figure this goal uses, from a measurement."""
        value = getattr(m, self.metric)
        return float(value) if value is not None else None

    def latency(self, m: Measurement) -> float | None:
        """The latency percentile this goal uses, from a measurement."""
        value = getattr(m, f"p{self.percentile}_ms")
        return float(value) if value is not None else None

    def value_of(self, gpus: int, rate: float) -> float:
        """The objective for a config on ``gpus`` GPUs running at ``rate``."""
        if self.kind == "throughput":
            return gpus / rate if rate > 0 else FAILED_COST
        return rate

    @property
    def worst(self) -> float:
        """The objective of a trial that measured nothing."""
        return FAILED_COST if self.kind == "throughput" else 0.0

    def better(self, a: float, b: float, by: float = 0.0) -> bool:
        """Whether value ``a`` beats ``b`` by more than the fraction ``by``."""
        if self.kind == "throughput":
            return a < b * (1.0 - by)
        return a > b * (1.0 + by)

    def gap(self, value: float, optimum: float) -> float:
        """Relative regret of ``value`` against the ``optimum`` (0 = optimal)."""
        if self.kind == "throughput":
            return value / optimum - 1.0
        return 1.0 - value / optimum

    def judge(self, config: Config, m: Measurement) -> Verdict:
        """Score one trial: objective value, constraints, and the reason it misses (if it does)."""
        rate = self.rate(m) if m.ok else None
        lat = self.latency(m) if m.ok else None
        if rate is None or rate <= 0 or not math.isfinite(rate):
            what = {"oom": "out of memory", "error": "crashed"}.get(m.status, "measured nothing")
            detail = f": {m.message}" if m.message else ""
            cons = {"runs": 1.0}
            if self.floor is not None:
                cons["throughput"] = 1.0
            if self.ceiling_ms is not None:
                cons["latency"] = 1.0
            return Verdict(
                self.worst,
                cons,
                False,
                sum(cons.values()),
                f"{what} at {config.describe()}{detail}",
            )
        cons = {"runs": -1.0}
        reasons: list[str] = []
        unit = "samples/s" if self.metric == "samples_per_s" else "tokens/s"
        if self.floor is not None:
            cons["throughput"] = (self.floor - rate) / self.floor
            if rate < self.floor:
                reasons.append(
                    f"{rate:,.1f} {unit} at {config.describe()} < {self.floor:g} {unit} floor"
                )
        if self.ceiling_ms is not None:
            if lat is None:
                cons["latency"] = 1.0
                reasons.append(f"no p{self.percentile} measured at {config.describe()}")
            else:
                cons["latency"] = (lat - self.ceiling_ms) / self.ceiling_ms
                if lat > self.ceiling_ms:
                    reasons.append(
                        f"p{self.percentile} {lat:.1f} ms at {config.describe()} > "
                        f"{self.ceiling_ms:g} ms ceiling"
                    )
        violation = sum(v for v in cons.values() if v > 0)
        return Verdict(
            self.value_of(config.gpus, rate), cons, not reasons, violation, "; ".join(reasons)
        )
