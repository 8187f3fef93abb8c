"""Tuning as work on the pool: the tuner drives a gang of worker actors on pool GPUs.

The scheduler places a tuning run like any job (the policy orders it, so interactive jobs still
go first) on as many GPUs as the policy gives the job, and :func:`tune_job` runs there in a Ray
task. Every trial is a real profiling run of the workload through the worker harness on the
first ``g`` GPUs of that gang (``evaluators.gang``), so the GPU count (within the job's range
and the gang) and DDP against FSDP are tuned along with the per-GPU settings. The gang's GPUs
are the tuner's ``free_gpus``: a gang of ``k`` runs up to ``k`` one-GPU trials at once, on
disjoint slices of it.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from orchestrator.errors import PoolError, TuneError
from orchestrator.spec import JobSpec

if TYPE_CHECKING:
    from orchestrator.config import Settings
    from orchestrator.tuner.objective import Measurement
    from orchestrator.tuner.space import Config


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
        sharding included), ready for :func:`orchestrator.runtime.harness_config.tuned_spec`.
    """
    from orchestrator.store import JobStore
    from orchestrator.tuner.evaluators.gang import GangEvaluator
    from orchestrator.tuner.service import default_evaluator, tune_spec

    spec = JobSpec.model_validate(spec_data)
    evaluator = GangEvaluator(
        placement_group,
        spec.workload.ref,
        dict(spec.workload.args),
        job_id=job_id,
        num_threads=num_threads,
        seed=spec.run.seed,
        gpus_per_node=max(Counter(nodes).values()),
        memory_gb=spec.resources.memory_gb,
        network=spec.resources.network,
        **command_trials(spec, redis_url, namespace),
    )
    try:
        store = JobStore.from_url(redis_url, namespace)
        retune = _retune_of(store, job_id)
        report = tune_spec(
            spec,
            store,
            redis_url,
            job=job_id,
            # a service's trials are load tests run here, on this task's device (one at a
            # time); running them in the gang's actors, on its GPUs, is still to do
            evaluator=default_evaluator(spec, job=job_id, store=(redis_url, namespace))
            if spec.serve is not None
            else evaluator,
            free_gpus=evaluator.size if spec.serve is None else 1,
            retune=retune is not None,
            measured=[] if retune is None or retune[1] is None else [(retune[0], retune[1])],
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
        "feasible": result.status == "feasible",
        "retune": retune is not None,
        "previous": None if retune is None else retune[0].to_dict(),
    }


def command_trials(spec: JobSpec, redis_url: str, namespace: str) -> dict[str, Any]:
    """What a tuning gang needs to run a command job's trials: the job's command (each trial
    runs its script, as ``workers.command`` runs a job's) and its working directory, handed to
    the gang's trials as for a job run (``runtime.workdir``); nothing for a workload the
    harness runs."""
    from orchestrator.runtime.harness_config import command_config

    command = command_config(spec.workload)
    digest = spec.workload.working_dir
    if command is None or digest is None:
        return {}
    from orchestrator.runtime.workdir import working_dir_ref

    return {"command": command, "working_dir": working_dir_ref(redis_url, namespace, digest)}


def _retune_of(store: Any, job_id: str) -> tuple[Config, Measurement | None] | None:
    """The settings a job being re-tuned ran with and what they measured (``None`` when its
    run had no measured window), as the control loop wrote them with its requeue; ``None``
    if the job is not being re-tuned."""
    import json

    from orchestrator.errors import JobNotFound
    from orchestrator.tuner.objective import Measurement
    from orchestrator.tuner.space import Config

    try:
        rec = store.get(job_id)
    except JobNotFound:
        return None
    raw = rec.fields.get("retune")
    if not raw or rec.fields.get("tuned"):
        return None
    data = json.loads(raw)
    seen = data.get("measured") or {}
    if not seen.get("samples_per_s"):
        return Config.from_dict(data["config"]), None
    return Config.from_dict(data["config"]), Measurement.from_dict({"status": "ok", **seen})


@contextlib.contextmanager
def pool_gang(
    settings: Settings, gpus: int, *, timeout_s: float = 60.0, asked: str = ""
) -> Iterator[tuple[Any, tuple[str, ...], bool]]:
    """``gpus`` GPU slots of the pool for ``orch tune --gpus``: a placement group on Ray at
    ``RAY_ADDRESS``, or on a local instance (with virtual slots when there is no GPU).

    Args:
        asked: what asked for the slots, for the error when the pool is too small.

    Yields:
        ``(placement_group, node of each bundle, whether the slots are virtual)``.

    Raises:
        TuneError: the pool has fewer than ``gpus`` slots.
        PoolError: Ray cannot be reached, or the slots are not free within ``timeout_s``.
    """
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    from orchestrator.pool import GPUPool

    pool = GPUPool(settings)
    pool.start()
    pg = None
    try:
        nodes = pool.nodes()
        total = sum(n.gpus for n in nodes)
        if gpus > total:
            raise TuneError(f"{asked or f'--gpus {gpus}'}: the pool has {total} GPU slot(s)")
        pg = placement_group([{"GPU": 1}] * gpus, strategy="PACK")
        ready, _ = ray.wait([pg.ready()], timeout=timeout_s)
        if not ready:
            raise PoolError(
                f"{gpus} GPU slot(s) did not come free on the pool within {timeout_s:g} s "
                "(see `orch pool`)"
            )
        table = ray.util.placement_group_table(pg)
        where = table["bundles_to_node_id"]
        bundle_nodes = tuple(str(where[i]) for i in range(gpus))
        virtual = {n.node_id for n in nodes if n.virtual}
        yield pg, bundle_nodes, all(n in virtual for n in bundle_nodes)
    finally:
        if pg is not None:
            with contextlib.suppress(Exception):  # Ray already shut down
                remove_placement_group(pg)
        pool.stop()
