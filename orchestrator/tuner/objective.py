"""The SLA as an optimisation problem: one objective value and named constraints per trial.

- Throughput SLA (a floor, or work by a deadline): among configs whose throughput meets the
  floor, the lowest cost, in GPU-seconds per sample (``gpus / samples_per_s``), or with
  ``tuning.objective: energy`` in joules per sample (NVML's energy counter; a trial on a device
  without it has no such figure and counts as measuring nothing). Minimised.
- Latency SLA (a ceiling on a percentile of step time): the highest throughput among configs
  whose percentile meets the ceiling. Maximised. A stated throughput floor is a second
  constraint.
- A service (``serve:``; trials are load tests at its offered load): the fewest GPU-seconds
  per request served (``replicas x span / requests``, i.e. ``gpus / samples_per_s`` with a
  request as the sample), among configs whose *request* latency percentile (arrival to answer)
  meets the ceiling, that drop no request (``served``), and whose quantized outputs are
  within the stated tolerance of fp32's (``accuracy``). Minimised: a throughput goal with a
  ceiling, so its value, direction and ranking are the throughput goal's.

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
Cost = Literal["gpu_seconds", "energy"]

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
        peak_mem_mb: peak memory of one worker in this trial (restarted per run).
        data_wait_share: share of the step spent making the data (outside the timed step).
        gpu_busy_share: compute time over wall time on a GPU (``None`` on the CPU).
        energy_per_sample_j: joules per sample from NVML (``None`` without it).
        cost_s: profiling seconds the trial cost (GPU-seconds are ``cost_s * gpus``).
        message: why it failed, for ``error``/``oom``.
        offered, dropped: a load test's requests that arrived, and those that waited past
            the service's timeout (``None`` for other trials).
        quant_error: a quantized model's output error against fp32 (relative L2; also on a
            trial refused for it).
        data_wait_ms, fwd_bwd_ms, comm_ms, optimizer_ms, step_other_ms: a step's time in parts,
            mean per measured step (``workers.step_parts``): its data wait, then its timed step
            as forward and backward, the gradient sync's exposed time (``None``: not told
            apart, without accumulation), the optimizer's step and the rest (``None`` where a
            trial did not mark them: a command job's script).
    """

    PARTS = ("data_wait_ms", "fwd_bwd_ms", "comm_ms", "optimizer_ms", "step_other_ms")
    """The fields of a step's time in parts, in the order a table shows them."""

    status: Status
    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    peak_mem_mb: float | None = None
    data_wait_share: float | None = None
    gpu_busy_share: float | None = None
    energy_per_sample_j: float | None = None
    cost_s: float = 0.0
    message: str = ""
    offered: int | None = None
    dropped: int | None = None
    quant_error: float | None = None
    data_wait_ms: float | None = None
    fwd_bwd_ms: float | None = None
    comm_ms: float | None = None
    optimizer_ms: float | None = None
    step_other_ms: float | None = None

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
        batch_rule: what the job lets the tuner do with its global batch, in words, when it
            allows a range (``tuning.bounds.global_batch`` with its ``lr_scaling``); empty
            when the batch is kept, as by default.
        cost: what a throughput goal minimises: ``gpu_seconds`` per unit of ``metric``, or
            ``energy`` (joules per unit of ``metric``, where the trials measured it).
        serving: a service's goal (see the module doc): a sample is a request, the latency is
            a request's, and a trial must drop none; a larger batch may then lower the tail,
            so a missed ceiling prunes no larger one (``History.latency_misses``).
        quant_tolerance: the largest output error a quantized service may have.
    """

    kind: Literal["throughput", "latency"]
    metric: Literal["samples_per_s", "tokens_per_s"] = "samples_per_s"
    floor: float | None = None
    ceiling_ms: float | None = None
    percentile: int = 95
    batch_rule: str = ""
    cost: Cost = "gpu_seconds"
    serving: bool = False
    quant_tolerance: float | None = None

    @classmethod
    def from_spec(cls, spec: JobSpec) -> Goal:
        """The goal of a job: latency when it states a ceiling, else throughput.

        Work by a deadline becomes the floor ``work / deadline`` (the rate that finishes on time
        if the job starts at once; queueing time is the scheduler's business).
        """
        tp, lat = spec.sla.throughput, spec.sla.latency
        gb, rule = spec.tuning.bounds.global_batch, spec.tuning.bounds.lr_scaling
        batch_rule = ""
        if gb is not None and gb.min < gb.max:
            lr = "kept" if rule == "none" else "by the job's own rule" if rule == "script" else rule
            batch_rule = f"global batch {gb.min}-{gb.max}, learning rate {lr}"
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
        if spec.serve is not None and lat is not None:
            return cls(
                "throughput",
                ceiling_ms=lat.max_ms,
                percentile=lat.percentile,
                serving=True,
                quant_tolerance=spec.serve.quant_tolerance,
            )
        if lat is not None:
            return cls("latency", metric, floor, lat.max_ms, lat.percentile, batch_rule)
        return cls("throughput", metric, floor, batch_rule=batch_rule, cost=spec.tuning.objective)

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
        per = "sample" if self.metric == "samples_per_s" else "token"
        if self.serving:
            per, parts = "request", [f"request p{self.percentile} <= {self.ceiling_ms:g} ms"]
        spent = "J" if self.cost == "energy" else "GPU-s"
        head = f"min {spent} per {per}" if self.kind == "throughput" else f"max {unit}"
        text = f"{head} with {' and '.join(parts)}" if parts else head
        return f"{text} ({self.batch_rule})" if self.batch_rule else text

    def rate(self, m: Measurement) -> float | None:
        """The throughput figure this goal uses, from a measurement."""
        value = getattr(m, self.metric)
        return float(value) if value is not None else None

    def latency(self, m: Measurement) -> float | None:
        """The latency percentile this goal uses, from a measurement."""
        value = getattr(m, f"p{self.percentile}_ms")
        return float(value) if value is not None else None

    def value_of(self, gpus: int, rate: float, watts: float | None = None) -> float:
        """The objective for a config on ``gpus`` GPUs running at ``rate``; under an energy
        cost, each GPU drawing ``watts`` (joules per unit = watts x GPU-seconds per unit)."""
        if self.kind == "throughput":
            per_gpu_s = 1.0 if self.cost == "gpu_seconds" else watts
            return gpus / rate * per_gpu_s if rate > 0 and per_gpu_s is not None else FAILED_COST
        return rate

    def watts_per_gpu(self, gpus: int, m: Measurement) -> float | None:
        """A trial's mean power per GPU, from its energy per sample and throughput (``None``
        without an energy figure): how an energy cost is predicted for configs not yet run."""
        if m.energy_per_sample_j is None or not m.samples_per_s or gpus <= 0:
            return None
        return m.energy_per_sample_j * m.samples_per_s / gpus

    def _measured_value(self, gpus: int, rate: float, m: Measurement) -> float | None:
        """The objective of a trial that ran (``None``: an energy cost the trial lacks)."""
        if self.kind == "throughput" and self.cost == "energy":
            watts = self.watts_per_gpu(gpus, m)
            return None if watts is None else self.value_of(gpus, rate, watts)
        return self.value_of(gpus, rate)

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
        if rate is not None and (rate <= 0 or not math.isfinite(rate)):
            rate = None
        value = self._measured_value(config.gpus, rate, m) if rate is not None else None
        if rate is None or value is None:
            what = {"oom": "out of memory", "error": "crashed"}.get(m.status, "measured nothing")
            if rate is not None:
                what = "no energy figure (NVML's energy counter is unavailable here)"
            detail = f": {m.message}" if m.message else ""
            cons = {"runs": 1.0}
            self._serving(config, m, cons)
            if self.floor is not None:
                cons["throughput"] = 1.0
            if self.ceiling_ms is not None:
                cons["latency"] = 1.0
            return Verdict(
                self.worst,
                cons,
                False,
                sum(v for v in cons.values() if v > 0),
                f"{what} at {config.describe()}{detail}",
            )
        cons = {"runs": -1.0}
        reasons: list[str] = self._serving(config, m, cons)
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
        return Verdict(value, cons, not reasons, violation, "; ".join(reasons))

    def _serving(self, config: Config, m: Measurement, cons: dict[str, float]) -> list[str]:
        """A service's own constraints into ``cons`` (``served``: the share of requests
        dropped, ``accuracy``: the quantized outputs' error over the tolerance, normalised);
        returns why they are missed."""
        if not self.serving:
            return []
        reasons: list[str] = []
        if m.offered:
            lost = (m.dropped or 0) / m.offered
            cons["served"] = lost if lost > 0 else -1.0
            if lost > 0:
                reasons.append(
                    f"{m.dropped} of {m.offered} requests dropped at {config.describe()}"
                )
        tol = self.quant_tolerance
        if m.quant_error is not None and tol:
            cons["accuracy"] = (m.quant_error - tol) / tol
            if m.quant_error > tol:
                reasons.append(
                    f"{config.quantize} outputs {m.quant_error:.4f} from fp32's at "
                    f"{config.describe()} > {tol:g} tolerance"
                )
        return reasons
