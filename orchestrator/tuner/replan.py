"""Re-planned on resize: the parallel plan of an elastic job on a new GPU count, from what the
tuner measured and the plan model, with no new trials (issue 23).

When the scheduler grows or shrinks an elastic job, or places it on another size than the one
it was tuned to (issue 37: a job tuned to one GPU and given two), :func:`replanned_spec` picks
the plan, micro-batch and accumulation for the new size from the job's profile (its tuning
trials, ``orchestrator.tuner.profile``), keeping its global batch, in this order of evidence:

1. **measured**: a trial ran at that GPU count with the job's global batch (and its precision,
   checkpointing and compile): the best of those by the job's SLA wins;
2. **model**: else the plan model (:mod:`orchestrator.tuner.planmodel`) fitted on the profile's
   trials predicts every plan valid at that count (its model can split it:
   :func:`~workers.parallel.plan.split_problems`; its model state fits the GPU when the memory
   is known: :func:`~orchestrator.tuner.planmodel.fits`; a micro-batch no larger than the
   job's, as :func:`orchestrator.elastic.resized_spec` keeps it, so no new out-of-memory risk),
   and the best prediction wins. A plan that uses an axis no trial exercised (tensor or
   pipeline parallelism, or data-parallel sync) is left out: the fit leaves that term at 0,
   which is right for a search that will measure it and wrong for a choice nothing checks;
3. **rule**: with no profile, no usable trial or no candidate left, today's rule
   (:func:`orchestrator.elastic.resized_spec`: keep tp and pp, or without a plan the
   micro-batch, and re-derive the replicas and the accumulation).

**Per GPU kind** (issue 40): on its requested size a job runs its tuned config unless that
config's own trial peaked (``Measurement.peak_mem_mb``: CUDA's peak, on CPU slots the worker's
RSS) above the memory of the GPUs it gets (a job tuned on an 80 GB kind placed on a 24 GB one):
then the best measured config that fits them runs, and the job's message says why. A trial that
did not read its peak fits anywhere. On another kind a measured config's throughput scales by
the kinds' speeds alike, so the SLA's ranking among those that fit is the measured one. On GPUs
without the job's precision (bf16 on a T4 or V100: :func:`orchestrator.kinds.precisions`) the
best measured config valid there at a precision they have runs, else the job's own config at
the first they have (fp16 for bf16: the same memory), and the reason says so.

A job that runs no parallel plan is chosen among data-parallel configs only (its own sharding,
DDP, and FSDP where its bounds allow it; a command job's script only its own); a trial counts
only at the settings the job runs (precision, checkpointing, compile, the loader's, a script's
own), so the chosen config is one that was measured as it will run.

"Best by the SLA" is the tuner's own judgement (:meth:`Goal.judge`): configs that meet the SLA
before those that miss it (then the smallest miss), and among them a throughput floor takes the
fewest GPU-seconds per sample, a latency ceiling the highest throughput, which at one GPU count
and one global batch is the shortest mean step. Pure: the caller reads the profile and the
device memory and passes them in; the control loop's resize path calls it
(``orchestrator.control.facts`` ``sized``, on ``control.gangs``' launch), so what was measured
is what runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from orchestrator.elastic import global_batch, resized_spec
from orchestrator.spec import JobSpec, PlanSettings
from orchestrator.tuner.objective import Goal, Measurement
from orchestrator.tuner.plan_space import unsplittable
from orchestrator.tuner.planmodel import PlanModel, PlanSample, fit_plan_model, fits
from orchestrator.tuner.space import Config
from workers.parallel.plan import Plan, divisors

__all__ = ["Replan", "candidates", "describe_applied", "layout_of", "replanned_spec"]

Source = Literal["requested", "measured", "model", "rule"]


def layout_of(spec: JobSpec) -> str:
    """How a spec's GPUs share the work: its plan (``dp 2 x tp 2, zero 3``), its sharding
    (``ddp``, ``fsdp``), ``replicas`` for a service, or ``one GPU``."""
    run = spec.run
    if spec.serve is not None:
        return "replicas"
    if run.plan is not None:
        return f"plan {Plan(**run.plan.model_dump()).describe()}"
    return run.sharding if spec.gpus > 1 else "one GPU"


@dataclass(frozen=True)
class Replan:
    """The spec a job runs with on a new GPU count, and where its plan came from.

    Attributes:
        spec: the resized spec (``None``: the size is outside the job's range, or no plan
            keeps its global batch there).
        source: ``measured`` (a trial at that size), ``model`` (the plan model's
            prediction), ``rule`` (no profile to choose by: tp and pp kept) or ``requested``.
        reason: the choice in words (what was measured or predicted, and why).
    """

    spec: JobSpec | None
    source: Source
    reason: str
    was: str = ""
    """The job's own precision, when these GPUs lack it and :attr:`spec` runs another."""

    def applied(self) -> dict[str, Any]:
        """What a run of :attr:`spec` applies (GPUs, plan, batch split, precision) and where
        it came from, as the job's ``applied`` field keeps it (empty without a spec)."""
        if self.spec is None:
            return {}
        run = self.spec.run
        return {
            "gpus": self.spec.gpus,
            "layout": layout_of(self.spec),
            "micro_batch": run.micro_batch,
            "grad_accum": run.grad_accum,
            "precision": run.precision,
            "source": self.source,
        }


def describe_applied(applied: Mapping[str, Any]) -> str:
    """:meth:`Replan.applied` in words: ``2 GPUs (ddp), micro-batch 8 x 2, bf16``."""
    gpus = applied.get("gpus", "?")
    return (
        f"{gpus} GPU{'' if gpus == 1 else 's'} ({applied.get('layout', '?')}), "
        f"micro-batch {applied.get('micro_batch', '?')} x {applied.get('grad_accum', '?')}, "
        f"{applied.get('precision', '?')}"
    )


def replanned_spec(
    spec: JobSpec,
    gpus: int,
    profile: Mapping[str, Any] | None = None,
    memory_bytes: float | None = None,
    precisions: Sequence[str] | None = None,
) -> Replan:
    """The job's spec on ``gpus`` GPUs with the plan its profile says is best for its SLA.

    Args:
        spec: the job as it runs at its requested size (tuned settings applied).
        gpus: the new GPU count.
        profile: the job's stored profile (``ProfileStore.load``), or ``None``.
        memory_bytes: each new GPU's memory, when known (plans whose model state exceeds it
            are left out).
        precisions: the precisions the new GPUs run, in the order to fall back to them
            (``None``: any).
    """
    if precisions is not None and spec.run.precision not in precisions:
        return _other_precision(spec, gpus, profile, memory_bytes, precisions)
    if gpus == spec.gpus:
        return _fitting(spec, gpus, profile, memory_bytes) or Replan(
            spec, "requested", "the requested size: the plan as tuned"
        )
    lo, hi = spec.resources.gpus.min, spec.resources.gpus.upper
    if not lo <= gpus <= hi:
        return Replan(None, "rule", f"{gpus} GPUs is outside the job's range {lo}-{hi}")
    ruled = resized_spec(spec, gpus)
    kept = "tp and pp kept" if spec.run.plan is not None else "micro-batch kept"
    points = _points(spec, profile)
    if not points:
        why = "no profile" if not profile else "no trial of its settings in the profile"
        return _by_rule(ruled, gpus, f"{why}: {kept}, the replicas follow the size")
    # at one GPU count energy per sample follows GPU-seconds per sample, which every trial
    # and prediction has (an energy figure only a trial on NVML has)
    goal = dataclasses.replace(Goal.from_spec(spec), cost="gpu_seconds")
    valid = candidates(spec, gpus, memory_bytes)
    keys = {_key(c) for c in valid}
    measured = [(c, m) for c, m in points if c.gpus == gpus and _key(c) in keys]
    if measured:
        config, m = _best(goal, measured)
        return _chosen(spec, config, "measured", f"measured {_says(goal, config, m)}")
    return _by_model(spec, gpus, points, valid, goal) or _by_rule(
        ruled,
        gpus,
        f"no plan valid on {gpus} GPUs uses only what the trials measured: {kept}, "
        "the replicas follow the size",
    )


def _other_precision(
    spec: JobSpec,
    gpus: int,
    profile: Mapping[str, Any] | None,
    memory_bytes: float | None,
    precisions: Sequence[str],
) -> Replan:
    """The job on GPUs without its precision (see the module doc)."""
    was, kept = spec.run.precision, f"these GPUs have no {spec.run.precision}"
    lo, hi = spec.resources.gpus.min, spec.resources.gpus.upper
    if not lo <= gpus <= hi:
        return Replan(None, "rule", f"{gpus} GPUs is outside the job's range {lo}-{hi}", was)
    goal = dataclasses.replace(Goal.from_spec(spec), cost="gpu_seconds")
    measured = []
    for p in precisions:
        other = _with_precision(spec, p)
        valid = {_key(c) for c in candidates(other, gpus, memory_bytes)}
        for c, m in _points(other, profile):
            if c.gpus == gpus and _key(c) in valid and _holds(m, memory_bytes):
                measured.append((other, c, m))
    if measured:
        best = _best(goal, [(c, m) for _, c, m in measured])
        other, c, m = next(x for x in measured if (x[1], x[2]) == best)
        why = f"{kept}: measured {_says(goal, c, m)} at {other.run.precision}"
        return dataclasses.replace(_chosen(other, c, "measured", why), was=was)
    other = _with_precision(spec, precisions[0])
    plan = replanned_spec(other, gpus, profile, memory_bytes)
    source: Source = "rule" if plan.source == "requested" else plan.source
    why = f"{kept}: runs {precisions[0]}, not measured ({was} was); {plan.reason}"
    return Replan(plan.spec, source, why, was)


def _with_precision(spec: JobSpec, precision: str) -> JobSpec:
    """``spec`` at another precision."""
    run = spec.run.model_copy(update={"precision": precision})
    return JobSpec.model_validate({**spec.model_dump(by_alias=True), "run": run.model_dump()})


def _holds(m: Measurement, memory_bytes: float | None) -> bool:
    """Whether the trial's peak memory fits GPUs of ``memory_bytes`` (unknown: it does)."""
    peak = m.peak_mem_mb
    return memory_bytes is None or peak is None or peak * 2**20 <= memory_bytes


def _fitting(
    spec: JobSpec, gpus: int, profile: Mapping[str, Any] | None, memory_bytes: float | None
) -> Replan | None:
    """On the requested size: the best measured config that fits ``memory_bytes`` when the
    tuned config's own trial needed more (``None``: the tuned config holds, or nothing
    measured fits either)."""
    if memory_bytes is None:
        return None
    points = [(c, m) for c, m in _points(spec, profile) if c.gpus == gpus]
    run = spec.run
    own = [
        m for c, m in points if (c.micro_batch, c.grad_accum) == (run.micro_batch, run.grad_accum)
    ]
    if not own or all(_holds(m, memory_bytes) for m in own):
        return None
    fit = [(c, m) for c, m in points if _holds(m, memory_bytes)]
    if not fit:
        return None
    goal = dataclasses.replace(Goal.from_spec(spec), cost="gpu_seconds")
    config, m = _best(goal, fit)
    need = max(m.peak_mem_mb or 0.0 for m in own)
    why = (
        f"the tuned micro-batch {run.micro_batch} x {run.grad_accum} peaked at {need:,.0f} MB, "
        f"over these GPUs' {memory_bytes / 2**20:,.0f} MB: measured {_says(goal, config, m)}"
    )
    return _chosen(spec, config, "measured", why)


def _by_model(
    spec: JobSpec,
    gpus: int,
    points: Sequence[tuple[Config, Measurement]],
    valid: Sequence[Config],
    goal: Goal,
) -> Replan | None:
    """The plan model's best of ``valid`` (those within the job's micro-batch whose every
    axis a trial exercised), fitted on ``points``; ``None`` when none is left."""
    samples = [PlanSample(c, c.global_batch / _rate(m), goal.latency(m) or 0.0) for c, m in points]
    model = fit_plan_model(samples)
    seen = [c for c, _ in points]
    left = [c for c in valid if c.micro_batch <= spec.run.micro_batch and _exercised(c, seen)]
    if model is None or not left:
        return None
    config, m = _best(goal, [(c, _predict(model, goal, c)) for c in left])
    fit = f"fit error {model.error:.0%} on {len(points)} trials"
    text = f"predicted {_says(goal, config, m)} ({fit}; best of {len(left)} configs)"
    return _chosen(spec, config, "model", text)


def _best(goal: Goal, scored: Sequence[tuple[Config, Measurement]]) -> tuple[Config, Measurement]:
    """The best config by the SLA: meets it, then the smallest miss, then the objective."""

    def rank(cm: tuple[Config, Measurement]) -> tuple[bool, float, float]:
        v = goal.judge(*cm)
        return (not v.feasible, v.violation, v.value if goal.direction == "minimize" else -v.value)

    return min(scored, key=rank)


def candidates(spec: JobSpec, gpus: int, memory_bytes: float | None = None) -> list[Config]:
    """Every config on ``gpus`` GPUs that keeps the job's global batch at its precision,
    checkpointing and compile: each plan valid there (``tuning.bounds.plan`` when set, else
    every degree the GPU count allows, less those the model cannot split or whose model state
    exceeds ``memory_bytes``) at each split of the batch."""
    plans = _plans(spec, gpus)
    refused = unsplittable(spec, plans)
    shape = spec.model_shape()
    params = shape.params if shape is not None else None
    batch = global_batch(spec)
    out: list[Config] = []
    for tp, pp, zero in plans:
        if (tp, pp, zero) in refused or Plan.on(gpus, tp, pp, zero) is None:
            continue
        replicas = gpus // (tp * pp)
        if batch % replicas:
            continue
        for micro in divisors(batch // replicas):
            c = _config(spec, gpus, tp, pp, zero, micro, batch // replicas // micro)
            if params is None or memory_bytes is None or fits(c, params, memory_bytes):
                out.append(c)
    return out


def _plans(spec: JobSpec, gpus: int) -> list[tuple[int, int, int]]:
    """The ``(tp, pp, zero)`` choices on ``gpus`` GPUs: the tuning bounds'; for a job that
    runs no parallel plan, data parallelism alone (its sharding as tuned, and FSDP where its
    bounds allow it; a command job's script applies no sharding of the harness's); else all."""
    pb = spec.tuning.bounds.plan
    if pb is not None:
        return sorted({(t, p, z) for t in pb.tp for p in pb.pp for z in pb.zero})
    if spec.run.plan is None:
        own = 3 if spec.run.sharding == "fsdp" else 0
        if spec.workload.command is not None:
            return [(1, 1, own)]
        fsdp = spec.tuning.bounds.sharding is None or "fsdp" in spec.tuning.bounds.sharding
        return sorted({(1, 1, own), (1, 1, 0), *([(1, 1, 3)] if fsdp else [])})
    return [(t, p, z) for t in divisors(gpus) for p in divisors(gpus // t) for z in range(4)]


def _config(
    spec: JobSpec, gpus: int, tp: int, pp: int, zero: int, micro: int, accum: int
) -> Config:
    run = spec.run
    return Config(
        micro,
        accum,
        gpus,
        "fsdp" if zero == 3 else "ddp",
        run.precision,
        run.activation_checkpointing,
        run.compile,
        tp,
        pp,
        zero,
    )


def _key(c: Config) -> tuple[int, int, int, int, int, int]:
    return (c.gpus, c.tp, c.pp, c.zero, c.micro_batch, c.grad_accum)


def _points(spec: JobSpec, profile: Mapping[str, Any] | None) -> list[tuple[Config, Measurement]]:
    """The profile's trials that ran, at the job's global batch and settings (precision,
    checkpointing, compile, the loader's and a command job's own settings as they run)."""
    run, batch = spec.run, global_batch(spec)
    own = _own_settings(spec)
    out = []
    for row in ((profile or {}).get("curves") or {}).get(run.precision, []):
        c, m = Config.from_dict(row), Measurement.from_dict(row)
        if m.ok and m.samples_per_s and c.global_batch == batch and _settings_of(c) == own:
            out.append((c, m))
    return out


def _settings_of(c: Config) -> tuple[object, ...]:
    """What a config sets besides its size, plan and batch split (a script's settings as
    values: ``3`` and ``3.0`` are one setting)."""
    return (c.activation_checkpointing, c.compile, c.loader, c.script_settings())


def _own_settings(spec: JobSpec) -> tuple[object, ...]:
    """:func:`_settings_of` the config ``spec`` runs (its script settings at their values)."""
    run = spec.run
    script = {name: s.default for name, s in spec.workload.settings.items()}
    return (run.activation_checkpointing, run.compile, run.loader.token(), script)


def _exercised(c: Config, seen: Sequence[Config]) -> bool:
    """Whether every axis ``c`` uses was in some measured trial (else its term is unfitted)."""
    return all(
        any(uses(s) for s in seen)
        for uses in (
            (lambda s: s.tp > 1) if c.tp > 1 else None,
            (lambda s: s.pp > 1) if c.pp > 1 else None,
            (lambda s: s.replicas > 1) if c.replicas > 1 else None,
        )
        if uses is not None
    )


def _predict(model: PlanModel, goal: Goal, c: Config) -> Measurement:
    """What the model expects a run of ``c`` to measure (the goal's percentile only)."""
    rate, ms = model.samples_per_s(c), model.latency_ms(c)
    return Measurement.from_dict(
        {"status": "ok", "samples_per_s": rate, f"p{goal.percentile}_ms": ms}
    )


def _rate(m: Measurement) -> float:
    return float(m.samples_per_s or 0.0)


def _says(goal: Goal, c: Config, m: Measurement) -> str:
    plan = Plan(c.replicas, c.tp, c.pp, c.zero).describe()
    lat = goal.latency(m)
    return (
        f"{plan}, micro-batch {c.micro_batch} x {c.grad_accum}: {_rate(m):,.1f} samples/s, "
        f"p{goal.percentile} {lat or 0:.0f} ms ({goal.describe()})"
    )


def _chosen(spec: JobSpec, c: Config, source: Source, reason: str) -> Replan:
    """``spec`` running config ``c`` (its plan, micro-batch and accumulation). A job that ran
    no parallel plan keeps running none where ``c`` is data parallelism alone (its sharding
    says it)."""
    old = spec.run.plan
    offload = bool(old is not None and old.offload and c.zero == 3 and c.replicas > 1)
    plan: PlanSettings | None = PlanSettings(
        dp=c.replicas, tp=c.tp, pp=c.pp, zero=c.zero, offload=offload
    )
    if old is None and not c.planned:
        plan = None
    update: dict[str, object] = {
        "micro_batch": c.micro_batch,
        "grad_accum": c.grad_accum,
        "data_parallel": c.gpus,
        "sharding": c.sharding,
        "plan": plan,
    }
    run = spec.run.model_copy(update=update)
    sized = JobSpec.model_validate({**spec.model_dump(by_alias=True), "run": run.model_dump()})
    return Replan(sized, source, reason)


def _by_rule(ruled: JobSpec | None, gpus: int, why: str) -> Replan:
    if ruled is None:
        return Replan(None, "rule", f"{why}; no plan keeps the global batch on {gpus} GPUs")
    plan = ruled.run.plan
    said = Plan(**plan.model_dump()).describe() if plan is not None else f"{gpus} replicas"
    return Replan(ruled, "rule", f"by rule ({why}): {said}")
