"""The runtime contract (``contract.py``) on both runtimes: the in-process one the control tests
use, and the Ray runtime on the session's multi-node cluster (real Ray, Redis and torch)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import Settings
from orchestrator.pool import GPUPool
from orchestrator.runtime.base import EventKind, Launch, OutcomeKind
from orchestrator.runtime.local import LocalRuntime
from orchestrator.runtime.ray_gang import RayRuntime
from orchestrator.storage import StorageLocation
from orchestrator.store import JobStore
from tests.e2e.jobs import mlp_job
from tests.runtime.contract import RuntimeContract, until


def _launch(node: str, folder: Path, name: str, serial: int, long: bool) -> Launch:
    # a long run trains until stopped, with no periodic checkpoint: a checkpoint in its folder
    # is the stop's
    run: dict[str, Any] = {"duration_s": 600} if long else {"steps": 3}
    return Launch(
        f"{name}-1",
        "run",
        mlp_job(name, checkpoint_every=0, **run),
        (node,),
        "STRICT_PACK",
        serial,
        StorageLocation(str(folder / name)),
        virtual=True,
    )


class LocalDriver:
    """The in-process runtime: the test ends its runs."""

    def __init__(self, folder: Path) -> None:
        self.runtime = LocalRuntime([("n0", 2), ("n1", 1)])
        self.folder = folder

    def launch(self, name: str, serial: int, *, long: bool = False) -> Launch:
        return _launch("n0", self.folder, name, serial, long)

    def finish(self, launch: Launch) -> None:
        self.runtime.end(launch.job_id, OutcomeKind.FINISHED, result={"status": "finished"})

    def stepped(self, launch: Launch) -> bool:
        return True  # a local run has no steps: it may be stopped as soon as it started


class TestLocalRuntime(RuntimeContract):
    @pytest.fixture
    def driver(self, tmp_path: Path) -> LocalDriver:
        return LocalDriver(tmp_path)


class RayDriver:
    """The Ray runtime on the session's cluster: a run ends on its own after its steps."""

    def __init__(self, runtime: RayRuntime, store: JobStore, folder: Path) -> None:
        self.runtime = runtime
        self.store = store
        self.folder = folder
        self.node = next(n.node_id for n in runtime.nodes() if n.gpus)

    def launch(self, name: str, serial: int, *, long: bool = False) -> Launch:
        return _launch(self.node, self.folder, name, serial, long)

    def finish(self, launch: Launch) -> None:
        """Nothing to do: the run ends after its few steps."""

    def stepped(self, launch: Launch) -> bool:
        return int(self.store.metrics(launch.job_id).get("step", 0)) > 0


@pytest.mark.slow
class TestRayRuntime(RuntimeContract):
    @pytest.fixture
    def driver(
        self, ray_cluster: Any, redis_url: str, store: JobStore, tmp_path: Path
    ) -> Iterator[RayDriver]:
        settings = Settings(ray_address=ray_cluster.address, data_dir=tmp_path)
        runtime = RayRuntime(GPUPool(settings), redis_url, store.namespace)
        yield RayDriver(runtime, store, tmp_path / "checkpoints")
        left = runtime.alive()
        for job_id in left:  # a failed test's runs: give their GPUs back to the next test
            runtime.stop(job_id, at_once=True)
        ended: set[str] = set()

        def all_ended() -> bool:
            ended.update(e.job_id for e in runtime.poll() if e.kind is EventKind.ENDED)
            return left <= ended

        until("the runs' ends", all_ended)
        runtime.close()
