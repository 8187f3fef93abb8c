"""One way from a job to the worker harness's configuration, for job runs and tuning trials.

A job runs with its spec as submitted, replaced by the tuner's chosen settings when it was
tuned, and re-sized (same global batch) when an elastic job gets another GPU count:
:func:`run_spec` does those three steps. :func:`harness_config` turns run settings into the
plain dict the harness takes; a job run (:func:`job_harness_config`) and a tuning trial (the
tuner's evaluators) both go through it, so a setting the tuner measured is the setting the job
runs with.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from orchestrator.spec import JobSpec

if TYPE_CHECKING:
    from orchestrator.tuner.space import Config

__all__ = ["Knobs", "harness_config", "job_harness_config", "run_spec", "tuned_spec"]


class Knobs(Protocol):
    """The run settings the tuner turns (``RunSettings`` of a spec, or a tuner ``Config``)."""

    @property
    def micro_batch(self) -> int: ...
    @property
    def grad_accum(self) -> int: ...
    @property
    def precision(self) -> str: ...
    @property
    def activation_checkpointing(self) -> bool: ...
    @property
    def compile(self) -> bool: ...
    @property
    def sharding(self) -> str: ...


def harness_config(
    workload: str,
    workload_args: Mapping[str, Any],
    knobs: Knobs,
    *,
    steps: int | None = None,
    duration_s: float | None = None,
    work_tokens: int | None = None,
    warmup_steps: int,
    checkpoint_every: int = 0,
    seed: int = 0,
) -> dict[str, Any]:
    """The harness configuration (``workers.config.HarnessConfig`` as a plain dict: it crosses
    to Ray workers) for a workload under ``knobs``; exactly one of ``steps``, ``duration_s``
    and ``work_tokens`` gives the run's length."""
    return {
        "workload": workload,
        "workload_args": dict(workload_args),
        "micro_batch": knobs.micro_batch,
        "grad_accum": knobs.grad_accum,
        "precision": knobs.precision,
        "activation_checkpointing": knobs.activation_checkpointing,
        "compile": knobs.compile,
        "sharding": knobs.sharding,
        "steps": steps,
        "duration_s": duration_s,
        "work_tokens": work_tokens,
        "warmup_steps": warmup_steps,
        "checkpoint_every": checkpoint_every,
        "seed": seed,
    }


def job_harness_config(spec: JobSpec) -> dict[str, Any]:
    """The harness configuration of a job run (``spec`` as it runs: see :func:`run_spec`).

    Its length: the work of a throughput SLA with a deadline (samples as steps, or tokens),
    else ``run.steps`` or ``run.duration_s``.
    """
    run = spec.run
    tp = spec.sla.throughput
    steps, duration_s, work_tokens = run.steps, run.duration_s, None
    if tp is not None and tp.work_samples is not None:
        steps = spec.steps_for()
    elif tp is not None and tp.work_tokens is not None:
        steps, duration_s, work_tokens = None, None, tp.work_tokens
    return harness_config(
        spec.workload.ref,
        spec.workload.args,
        run,
        steps=steps,
        duration_s=duration_s if steps is None else None,
        work_tokens=work_tokens,
        warmup_steps=run.warmup_steps,
        checkpoint_every=run.checkpoint_every,
        seed=run.seed,
    )


def run_spec(spec: JobSpec, tuned: Mapping[str, Any] | None, gpus: int | None = None) -> JobSpec:
    """The spec a job runs with: as submitted, with the tuner's chosen config when it was
    tuned, on ``gpus`` GPUs (an elastic job keeps its global batch; see ``elastic``).

    Raises:
        ValueError: the job cannot keep its global batch on ``gpus`` GPUs.
    """
    if tuned:
        from orchestrator.tuner.space import Config

        spec = tuned_spec(spec, Config.from_dict(dict(tuned)))
    if gpus is None or gpus == spec.gpus:
        return spec
    from orchestrator.elastic import resized_spec

    sized = resized_spec(spec, gpus)
    if sized is None:
        raise ValueError(f"cannot keep the global batch on {gpus} GPUs")
    return sized


def tuned_spec(spec: JobSpec, config: Config) -> JobSpec:
    """``spec`` with its run settings replaced by a tuned config (what the control loop runs).

    The data-parallel degree becomes ``config.gpus`` and ``run.sharding`` becomes
    ``config.sharding`` (DDP or FSDP). A one-GPU config says nothing about sharding (it is always
    ``ddp`` there), so the spec's own ``run.sharding`` stays: it applies if the job is resized.
    """
    sharding = config.sharding if config.gpus > 1 else spec.run.sharding
    run = spec.run.model_copy(
        update={
            "micro_batch": config.micro_batch,
            "grad_accum": config.grad_accum,
            "precision": config.precision,
            "activation_checkpointing": config.activation_checkpointing,
            "compile": config.compile,
            "data_parallel": config.gpus,
            "sharding": sharding,
        }
    )
    return JobSpec.model_validate({**spec.model_dump(by_alias=True), "run": run.model_dump()})
