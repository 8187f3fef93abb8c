"""Tuning as work on the pool: the tuner runs inside a Ray worker that holds one GPU slot.

The scheduler places a tuning run like any job (the policy orders it, so interactive jobs
still go first) on a one-GPU gang, and this function runs there: every trial profiles the real
workload on that GPU through the worker harness. The GPU count and the sharding are the job's
own, not tuned here (trials run on one device); the per-GPU settings are.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from orchestrator.spec import JobSpec


def one_gpu(spec: JobSpec) -> JobSpec:
    """The spec tuned on one GPU slot: its per-GPU settings are searched there."""
    data = spec.model_dump(mode="json", by_alias=True)
    data["resources"]["gpus"] = {"min": 1, "max": 1}
    data["run"]["data_parallel"] = None
    bounds = data["tuning"]["bounds"]
    bounds["gpus"] = None
    bounds["sharding"] = None
    return JobSpec.model_validate(data)


def tune_job(
    spec_data: dict[str, Any], redis_url: str, namespace: str, job_id: str
) -> dict[str, Any]:
    """Tune a job (in a Ray worker); returns what the scheduler needs.

    Returns:
        ``{"run": bool, "config": dict | None, "reason": str, "cache": str, "trials": int}``;
        ``config`` is the chosen per-GPU config at the job's own GPU count and sharding, ready for
        :func:`orchestrator.tuner.service.tuned_spec`.
    """
    from orchestrator.store import open_url
    from orchestrator.tuner.service import tune_spec

    spec = JobSpec.model_validate(spec_data)
    report = tune_spec(one_gpu(spec), open_url(redis_url), redis_url, namespace, job=job_id)
    result = report.result
    chosen = result.chosen  # the best; for a best-effort job, else the closest to feasible
    config = None
    if chosen is not None:
        config = dataclasses.replace(
            chosen.config, gpus=spec.gpus, sharding=spec.run.sharding
        ).to_dict()
    near = result.closest
    closest = near.config.describe() if near is not None else "none could run"
    return {
        "run": report.run and config is not None,
        "config": config,
        "reason": result.reason or "",
        "closest": closest,
        "cache": report.cache,
        "trials": result.trials,
    }
