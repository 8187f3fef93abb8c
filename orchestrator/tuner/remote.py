"""Tuning as work on the pool: the tuner drives a gang of worker actors on pool GPUs.

The scheduler places a tuning run like any job (the policy orders it, so interactive jobs still
go first) on as many GPUs as the policy gives the job, and :func:`tune_job` runs there in a Ray
task. Every trial is a real profiling run of the workload through the worker harness on the
first ``g`` GPUs of that gang (``evaluators.gang``), so the GPU count (within the job's range
and the gang) and DDP against FSDP are tuned along with the per-GPU settings.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from orchestrator.spec import JobSpec


def tune_job(
    spec_data: dict[str, Any],
    redis_url: str,
    namespace: str,
    job_id: str,
    placement_group: Any,
    nodes: tuple[str, ...],
    num_threads: int | None = None,
) -> dict[str, Any]:
    """Tune a job on the GPUs of ``placement_group`` (in a Ray task); returns what the
    scheduler needs.

    Args:
        nodes: the node of each bundle (the policy's placement), which tells the performance
            model how many of the gang's GPUs share a node.

    Returns:
        ``{"run": bool, "config": dict | None, "reason": str, "closest": str, "cache": str,
        "trials": int, "gpus": int}``; ``config`` is the chosen config (its GPU count and
        sharding included), ready for :func:`orchestrator.tuner.service.tuned_spec`.
    """
    from orchestrator.store import open_url
    from orchestrator.tuner.evaluators.gang import GangEvaluator
    from orchestrator.tuner.service import tune_spec

    spec = JobSpec.model_validate(spec_data)
    evaluator = GangEvaluator(
        placement_group,
        spec.workload.ref,
        dict(spec.workload.args),
        job_id=job_id,
        num_threads=num_threads,
        seed=spec.run.seed,
        gpus_per_node=max(Counter(nodes).values()),
    )
    try:
        report = tune_spec(
            spec, open_url(redis_url), redis_url, namespace, job=job_id, evaluator=evaluator
        )
    finally:
        evaluator.close()
    result = report.result
    chosen = result.chosen  # the best; for a best-effort job, else the closest to feasible
    near = result.closest
    return {
        "run": report.run and chosen is not None,
        "config": chosen.config.to_dict() if chosen is not None else None,
        "reason": result.reason or "",
        "closest": near.config.describe() if near is not None else "none could run",
        "cache": report.cache,
        "trials": result.trials,
        "gpus": evaluator.size,
    }
