"""Worker actors on a placement group: shared by job runs and the tuner's gang evaluator.

Kept apart from the Ray runtime (:mod:`orchestrator.runtime.ray_gang` and the runs of
:mod:`orchestrator.runtime.gang_run`) so that the tuner, which the Ray runtime starts for a
tuning run, can use the same actors without importing the runtime back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = [
    "DISTRIBUTED_ERRORS",
    "bundle_gpu_ids",
    "failure_message",
    "place_gang",
    "start_workers",
    "worker_options",
]

# torch.distributed's own error types: a collective failed because of a peer or the network.
DISTRIBUTED_ERRORS = frozenset(
    {"DistError", "DistBackendError", "DistNetworkError", "DistStoreError"}
)


def place_gang(nodes: tuple[str, ...], strategy: str, name: str) -> Any:
    """A placement group of one ``{"GPU": 1}`` bundle per entry of ``nodes``, bundle ``i`` on
    node ``nodes[i]`` (the policy chose the nodes; Ray only reserves them)."""
    from ray.util.placement_group import placement_group

    return placement_group(
        [{"GPU": 1} for _ in nodes],
        strategy=strategy,
        name=name,
        bundle_label_selector=[{"ray.io/node-id": n} for n in nodes],
    )


def worker_options(pg: Any, rank: int) -> dict[str, Any]:
    """Ray options of the worker actor of bundle ``rank`` of ``pg``: one GPU of the bundle, no
    CPU (a virtual GPU slot is the worker's CPU share), no restart (a lost rank is a lost run).
    The same for a job's, a tuning gang's and a warm pool's actors."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return {
        "num_cpus": 0,
        "num_gpus": 1,
        "max_concurrency": 2,  # request_stop runs while run is busy
        "max_restarts": 0,
        "scheduling_strategy": PlacementGroupSchedulingStrategy(
            pg, placement_group_bundle_index=rank
        ),
    }


def bundle_gpu_ids(pg: Any, index: int, timeout_s: float = 30.0) -> tuple[str, ...]:
    """The GPU ids Ray gives a worker placed in bundle ``index`` of ``pg`` (Ray chooses a
    bundle's GPUs when the group is placed, and tells only a process leased in it): asked by
    a task of no CPU placed there. It runs in one of Ray's pooled task processes, which holds
    no torch, so it takes milliseconds once Ray has such a process idle."""
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    probe = ray.remote(_accelerator_ids).options(
        num_cpus=0,
        num_gpus=1,
        max_retries=0,
        scheduling_strategy=PlacementGroupSchedulingStrategy(
            pg, placement_group_bundle_index=index
        ),
    )
    ids: list[str] = ray.get(probe.remote(), timeout=timeout_s)
    return tuple(ids)


def _accelerator_ids() -> list[str]:
    import ray

    return [str(i) for i in ray.get_runtime_context().get_accelerator_ids().get("GPU", [])]


def start_workers(
    pg: Any,
    job_id: str,
    *,
    num_threads: int | None,
    reporter_factory: Callable[[], Callable[[dict[str, Any]], None]] | None = None,
    log_sink_factory: Callable[[int], Any] | None = None,
) -> list[Any]:
    """One :class:`workers.actor.WorkerActor` per bundle of ``pg``, rank ``i`` in bundle ``i``
    (a job's gang, or a tuning gang); only rank 0 gets the report sink, every rank the log
    sink factory (``log_sink_factory(rank)``: where its captured output goes)."""
    import ray

    from workers.actor import WorkerActor

    world = len(pg.bundle_specs)
    remote_cls = ray.remote(WorkerActor)
    return [
        remote_cls.options(**worker_options(pg, rank)).remote(
            job_id=job_id,
            rank=rank,
            world_size=world,
            reporter_factory=reporter_factory if rank == 0 else None,
            log_sink_factory=log_sink_factory,
            num_threads=num_threads,
        )
        for rank in range(world)
    ]


def failure_message(err: BaseException) -> str:
    """The user-facing line of a worker failure: the original exception, not Ray's wrapper."""
    cause = getattr(err, "cause", None)
    if isinstance(cause, BaseException):
        err = cause
    text = str(err).strip().splitlines()
    if type(err).__name__ == "SandboxError" and text:  # says the job's own error type first
        return text[0][:500]
    return f"{type(err).__name__}: {text[0] if text else ''}"[:500]
