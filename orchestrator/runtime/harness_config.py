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

from orchestrator.loader_spec import LoaderSpec
from orchestrator.spec import JobSpec, PlanSettings, WorkloadRef

if TYPE_CHECKING:
    from orchestrator.run_config import Config

__all__ = [
    "Knobs",
    "command_config",
    "harness_config",
    "job_harness_config",
    "loader_dict",
    "lr_rule",
    "run_spec",
    "tuned_spec",
]


class Knobs(Protocol):
    """The run settings the tuner turns (``RunSettings`` of a spec, or a tuner ``Config``)."""

    @property
    def micro_batch(self) -> int: ...
    @property
    def grad_accum(self) -> int: ...
    @property
    def precision(self) -> str: ...
    @property
    def activation_checkpointing(self) -> bool | float: ...
    @property
    def compile(self) -> bool: ...
    @property
    def sharding(self) -> str: ...
    @property
    def loader(self) -> Any: ...


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
    lr_scaling: str = "none",
    base_global_batch: int | None = None,
    serve: dict[str, Any] | None = None,
    plan: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The harness configuration (``workers.config.HarnessConfig`` as a plain dict: it crosses
    to Ray workers) for a workload under ``knobs``; exactly one of ``steps``, ``duration_s``
    and ``work_tokens`` gives the run's length. ``lr_scaling`` and ``base_global_batch``: how
    the learning rate follows a global batch other than the job's own (see
    ``HarnessConfig``); ``serve``: a service's arrivals and batcher; ``plan``: the parallel plan
    (``workers.parallel.Plan`` as a dict; ``None``: every GPU a replica, by ``sharding``)."""
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
        "lr_scaling": lr_scaling,
        "base_global_batch": base_global_batch,
        "serve": serve,
        "plan": dict(plan) if plan is not None else None,
        "loader": loader_dict(knobs.loader),
    }


def loader_dict(loader: Any) -> dict[str, Any]:
    """The loader settings as ``HarnessConfig.loader`` takes them, from a spec's
    ``run.loader`` or a tuner config's token."""
    from workers.loader_settings import LoaderSettings

    if isinstance(loader, str):
        return LoaderSettings.from_token(loader).to_dict()
    return LoaderSettings(**loader.model_dump()).to_dict()


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
    config = harness_config(
        spec.workload.ref,
        spec.workload.args,
        run,
        steps=steps,
        duration_s=duration_s if steps is None else None,
        work_tokens=work_tokens,
        warmup_steps=run.warmup_steps,
        checkpoint_every=run.checkpoint_every,
        seed=run.seed,
        serve=spec.serve.harness() if spec.serve is not None else None,
        plan=run.plan.model_dump() if run.plan is not None else None,
        **lr_rule(spec),
    )
    command = command_config(spec.workload)
    if command is not None:
        config["command"] = command
    config["network"] = spec.resources.network
    config["memory_gb"] = spec.resources.memory_gb
    return config


def command_config(
    workload: WorkloadRef, settings: Mapping[str, Any] | None = None
) -> dict[str, Any] | None:
    """A command job's ``HarnessConfig.command`` (``None`` for another workload): its command
    line, its script's settings (each setting's ``default``, or the value ``settings`` gives:
    a tuning trial's), how long it may run before its first step report, and its working
    directory. The job's run and the tuner's trials both take it from here."""
    if workload.command is None:
        return None
    values = {name: s.default for name, s in workload.settings.items()}
    values.update(settings or {})
    return {
        "argv": list(workload.command),
        "settings": values,
        "first_report_s": workload.first_report_s,
        "working_dir": workload.working_dir,
    }


def lr_rule(spec: JobSpec) -> dict[str, Any]:
    """How the job's learning rate follows its global batch: ``lr_scaling`` (its
    ``tuning.bounds.lr_scaling``, ``none`` when the batch is fixed) and the global batch its
    learning rate is set for (``run.base_global_batch``, else its own)."""
    from orchestrator.elastic import global_batch

    return {
        "lr_scaling": spec.tuning.bounds.lr_scaling or "none",
        "base_global_batch": spec.run.base_global_batch or global_batch(spec),
    }


def run_spec(spec: JobSpec, tuned: Mapping[str, Any] | None, gpus: int | None = None) -> JobSpec:
    """The spec a job runs with: as submitted, with the tuner's chosen config when it was
    tuned, on ``gpus`` GPUs (an elastic job keeps its global batch; see ``elastic``).

    Raises:
        ValueError: the job cannot keep its global batch on ``gpus`` GPUs.
    """
    if tuned:
        from orchestrator.run_config import Config

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
    A config with a parallel plan (``config.plan()``) sets ``run.plan``. A service's config
    also sets ``serve.max_delay_ms`` and ``serve.quantize`` (its ``gpus`` are its replicas).
    ``run.base_global_batch`` records the global batch as submitted, which the learning-rate
    rule scales from when the tuner chose another one within ``tuning.bounds.global_batch``.
    A command job's script settings the tuner chose (``config.settings``) become those
    settings' ``default``: the value the script reads from its job context.
    """
    from orchestrator.elastic import global_batch

    sharding = config.sharding if config.gpus > 1 else spec.run.sharding
    tuned_plan = config.plan()
    plan = PlanSettings(**tuned_plan) if tuned_plan is not None else None
    run = spec.run.model_copy(
        update={
            "base_global_batch": spec.run.base_global_batch or global_batch(spec),
            "micro_batch": config.micro_batch,
            "grad_accum": config.grad_accum,
            "precision": config.precision,
            "activation_checkpointing": config.activation_checkpointing,
            "compile": config.compile,
            "data_parallel": config.gpus,
            "sharding": sharding,
            "loader": LoaderSpec(**loader_dict(config.loader)),
            "plan": plan,  # a tuned plan, or none: the sharding says it (and any old plan goes)
        }
    )
    data = {**spec.model_dump(by_alias=True), "run": run.model_dump()}
    if spec.serve is not None and config.max_delay_ms is not None:  # a service's batcher
        data["serve"] = spec.serve.model_copy(
            update={"max_delay_ms": config.max_delay_ms, "quantize": config.quantize}
        ).model_dump()
    chosen = config.script_settings()
    if chosen:
        settings = data["workload"]["settings"]
        for name, value in chosen.items():
            if name in settings:  # a setting the job no longer declares is not applied
                settings[name]["default"] = value
    return JobSpec.model_validate(data)
