"""The warm worker pool on the session's Ray cluster (real Ray, Redis and torch): a 1-GPU run
starts on a warm worker, and a gang that needs the GPUs warm workers hold gets them."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ray.util.placement_group import placement_group_table

from orchestrator.config import Settings
from orchestrator.pool import GPUPool, NodeInfo
from orchestrator.runtime.base import EventKind, Launch, Outcome, OutcomeKind
from orchestrator.runtime.ray_gang import RayRuntime
from orchestrator.store import JobStore
from tests.e2e.jobs import mlp_job

TIMEOUT_S = 120.0


class TwoGPUNodePool(GPUPool):
    """The session's pool seen as its 2-GPU node alone, so the warm workers go there only."""

    def nodes(self, refresh_probe_s: float = 30.0) -> list[NodeInfo]:
        return [n for n in super().nodes(refresh_probe_s) if n.gpus == 2]


def until(what: str, ready: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + TIMEOUT_S
    while not (value := ready()):
        assert time.monotonic() < deadline, f"no {what} within {TIMEOUT_S:g} s"
        time.sleep(0.1)
    return value


def warm_groups() -> list[str]:
    """The warm workers' placement groups that hold GPUs in Ray now."""
    return [
        pg["name"]
        for pg in placement_group_table().values()
        if pg["name"].startswith("orch-warm-") and pg["state"] == "CREATED"
    ]


def launch(
    settings: Settings, node: NodeInfo, name: str, gpus: int, serial: int, steps: int = 3
) -> Launch:
    """A run of an interactive MLP job of ``gpus`` GPUs on ``node``."""
    return Launch(
        f"{name}-1",
        "run",
        mlp_job(name, gpus=gpus, cls="interactive", steps=steps),
        (node.node_id,) * gpus,
        "STRICT_PACK",
        serial,
        settings.checkpoint_dir / name,
        virtual=True,
    )


def run_to_end(runtime: RayRuntime, launch: Launch) -> Outcome:
    """Launch and wait for the run's end (nothing else drives the runtime here)."""
    runtime.launch(launch)

    def ended() -> Outcome | None:
        for event in runtime.poll():
            if event.job_id == launch.job_id and event.kind is EventKind.ENDED:
                return event.outcome
        return None

    outcome: Outcome = until(f"end of {launch.job_id}", ended)
    return outcome


def test_a_1_gpu_run_starts_warm_and_a_gang_gets_the_gpus_warm_workers_hold(
    ray_cluster: Any, redis_url: str, store: JobStore, tmp_path: Path
) -> None:
    settings = Settings(ray_address=ray_cluster.address, data_dir=tmp_path)
    runtime = RayRuntime(TwoGPUNodePool(settings), redis_url, store.namespace, warm_workers=1)
    try:
        (node,) = runtime.nodes()
        warm = [(node.node_id, True)]

        def pool() -> list[tuple[str, bool]]:
            runtime.poll()  # as the loop does each round: the pool fills from the second on
            return runtime.warm.workers()

        until("a warm worker", lambda: pool() == warm)
        assert runtime.warm_workers() == {node.node_id: (1, 1)}  # it holds a GPU (pool view)

        # A 1-GPU run takes the warm worker: its worker's reports say it started warm.
        one = run_to_end(runtime, launch(settings, node, "one", 1, 1))
        assert one.kind is OutcomeKind.FINISHED, one.message
        assert store.metrics("one-1")["warm_start"] is True

        # The pool refills beside no run: a new warm worker holds one of the node's 2 GPUs in
        # Ray (its group is placed; it need not be warm yet). A 2-GPU gang there must have it
        # given up, or the gang's placement group never places.
        until("the pool refilled", lambda: len(pool()) == 1 and warm_groups())
        two = run_to_end(runtime, launch(settings, node, "two", 2, 2))
        assert two.kind is OutcomeKind.FINISHED, two.message
        assert store.metrics("two-1")["warm_start"] is False  # its ranks were started for it
        assert two.result["world_size"] == 2
    finally:
        runtime.close()
    assert runtime.warm.workers() == [] and warm_groups() == []  # all given up


def test_a_full_node_keeps_a_gpuless_warm_worker_that_takes_the_gpu_of_the_run_handed_it(
    ray_cluster: Any, redis_url: str, store: JobStore, tmp_path: Path
) -> None:
    """Where every GPU is busy the pool keeps a warm worker holding none (GPU-less), which
    no gang waits on; the 1-GPU run that follows a preemption starts on it, in a placement
    group of its own, and sees the GPU Ray gave that group, as a fresh worker would."""
    settings = Settings(ray_address=ray_cluster.address, data_dir=tmp_path)
    runtime = RayRuntime(TwoGPUNodePool(settings), redis_url, store.namespace, warm_workers=1)
    try:
        (node,) = runtime.nodes()

        def pool() -> list[tuple[str, bool]]:
            runtime.poll()
            return runtime.warm.workers()

        # A gang holds both GPUs: the pool's worker there is GPU-less.
        until("a warm worker", lambda: pool() == [(node.node_id, True)])
        runtime.launch(launch(settings, node, "big", 2, 1, steps=10**6))
        until("big's first report", lambda: store.metrics("big-1").get("step", 0) > 0)
        until(
            "a GPU-less warm worker", lambda: pool() == [(node.node_id, True)] and not warm_groups()
        )
        assert runtime.warm_workers() == {node.node_id: (1, 0)}

        # The gang is preempted; the 1-GPU run placed next takes it.
        runtime.stop("big-1")
        until(
            "big stopped",
            lambda: any(e.job_id == "big-1" and e.kind is EventKind.ENDED for e in runtime.poll()),
        )
        one = run_to_end(runtime, launch(settings, node, "one", 1, 2))
        assert one.kind is OutcomeKind.FINISHED, one.message
        metrics = store.metrics("one-1")
        assert metrics["warm_start"] is True
        assert metrics["visible_devices"] in {"0", "1"}  # the group's GPU ("" before binding)
    finally:
        runtime.close()
    assert runtime.warm.workers() == [] and warm_groups() == []
