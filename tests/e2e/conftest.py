"""End-to-end fixtures: a scheduler (with its own namespace and data directory) per test,
against the session's multi-node Ray cluster (``ray_cluster`` in ``tests/conftest.py``: a head
with no GPU, node A with 4 GPU slots, node B with 2) and Redis.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import Settings
from orchestrator.services import Running, serve_in_background
from orchestrator.store import JobStore
from orchestrator.store.records import JobRecord
from orchestrator.store.states import JobState
from orchestrator.teams import TeamConfig, TeamSpec

ROOT = Path(__file__).resolve().parents[2]
QUICK_RESTART_S = 5.0
"""What the loop of a test of a preemption's mechanics weighs a restart at (``restart_cost_s``,
30 s by default; about a gang's start on the loaded test machine): the ``shared`` policy holds
a preempted bulk job that long before it may run again (issue 28), a wait such a test only
sits through (tests/policies cover the hold)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test here is a multi-process end-to-end test: mark it ``slow``."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.slow)


@dataclass
class Orch:
    """A live orchestrator for one test: settings, store, scheduler thread, CLI runner."""

    settings: Settings
    store: JobStore
    running: Running

    def cli(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        """Run the real `orch` command in a subprocess against this orchestrator."""
        env = {
            **os.environ,
            "REDIS_URL": self.settings.redis_url or "",
            "ORCH_NAMESPACE": self.settings.namespace,
            "ORCH_DATA_DIR": str(self.settings.data_dir),
        }
        orch = Path(sys.executable).parent / "orch"
        return subprocess.run(
            [str(orch), *args],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=check,
        )

    def close(self) -> None:
        """Stop the scheduler, delete the namespace, and stop the embedded Redis server when
        this orchestrator started one (a test leaves no process behind)."""
        from orchestrator.store.server import EmbeddedRedis

        self.running.shutdown()
        self.store.delete_namespace()
        if self.settings.redis_url is None:
            EmbeddedRedis(self.settings.data_dir).stop()

    def wait(self, job_id: str, states: set[JobState], timeout_s: float = 180) -> JobRecord:
        """Poll the store until the job is in one of ``states``; fail the test on timeout."""
        deadline = time.monotonic() + timeout_s
        rec = self.store.get(job_id)
        while rec.state not in states:
            if self.running.errors:
                raise self.running.errors[0]
            if time.monotonic() > deadline:
                pytest.fail(f"{job_id} stayed {rec.state.value} ({rec.message}); wanted {states}")
            time.sleep(0.2)
            rec = self.store.get(job_id)
        return rec


@contextmanager
def kind_node(cluster: Any, o: Orch, kind: str, gpus: int, speed_pct: int) -> Iterator[None]:
    """A node of ``gpus`` virtual slots declaring ``kind`` at ``speed_pct``, added to the
    session's cluster as an operator declares one (``ray start --num-gpus 2 --resources
    '{"orch_gpu_kind:L4": 2, "orch_gpu_speed_pct": 40}'``), once ``o``'s scheduler publishes it
    in its pool; removed after, and waited for until Ray counts it dead (the next test's pool
    must not see its GPUs)."""
    import ray

    resources = {f"orch_gpu_kind:{kind}": gpus, "orch_gpu_speed_pct": speed_pct}
    node = cluster.add_node(num_cpus=1, num_gpus=gpus, resources=resources)
    try:
        cluster.wait_for_nodes()
        deadline = time.monotonic() + 30  # the scheduler publishes the pool it sees each round
        while not any(
            n.get("kind") == kind for n in (o.store.pool_view.read() or {}).get("nodes", [])
        ):
            assert time.monotonic() < deadline, o.store.pool_view.read()
            time.sleep(0.2)
        yield
    finally:
        node_id = node.node_id
        cluster.remove_node(node)
        deadline = time.monotonic() + 30
        while any(n["NodeID"] == node_id and n.get("Alive") for n in ray.nodes()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"node {node_id} still alive 30 s after its removal")
            time.sleep(0.2)


def start_orch(
    ray_address: str,
    redis_url: str | None,
    namespace: str,
    data_dir: Path,
    policy: str = "gang",
    restart_cost_s: float | None = None,
    **settings_: Any,
) -> Orch:
    """A scheduler on the shared cluster, in its own namespace and data directory (Redis at
    ``redis_url``; ``None``: the embedded server); ``restart_cost_s``, when given, is what its
    loop weighs a restart at (see :data:`QUICK_RESTART_S`); ``settings_`` set other settings."""
    # No warm worker pool unless a test asks for one (test_warm.py; the latency benchmark's
    # smoke run has the default): on the test machine's few cores, the warm workers every
    # test's scheduler would start, and refill after each job, slow the other tests' jobs.
    settings_.setdefault("warm_workers", 0)
    settings = Settings(
        redis_url=redis_url,
        ray_address=ray_address,
        data_dir=data_dir,
        namespace=namespace,
        scheduler_interval_s=0.2,
        policy=policy,
        **settings_,
    )
    running = serve_in_background(settings)
    if restart_cost_s is not None:
        running.scheduler.restart_cost_s = restart_cost_s
    store = running.scheduler.store
    # the test workloads are entry points in tests/: the operator's allow-list names them
    store.put_teams(TeamConfig(teams=[TeamSpec(name="e2e")], entry_modules=["tests"]))
    return Orch(settings, store, running)


@pytest.fixture
def orch(ray_cluster: Any, redis_url: str, namespace: str, tmp_path: Path) -> Iterator[Orch]:
    """A scheduler for this test; stopped, and its namespace deleted, afterwards."""
    o = start_orch(ray_cluster.address, redis_url, namespace, tmp_path)
    yield o
    o.running.shutdown()
    o.store.delete_namespace()


@pytest.fixture
def shared(ray_cluster: Any, redis_url: str, namespace: str, tmp_path: Path) -> Iterator[Orch]:
    """Like :func:`orch`, with the default ``shared`` policy (preemption, teams, elastic)."""
    o = start_orch(ray_cluster.address, redis_url, namespace, tmp_path, policy="shared")
    yield o
    o.running.shutdown()
    o.store.delete_namespace()


@pytest.fixture
def hold() -> Iterator[Path]:
    """A file that holds the runs of ``tests.e2e.slowed_workload`` given it as ``hold`` slowed
    while it exists: a test removes it once it has seen what it waits for, and the runs go on
    at full speed. Created in a folder a sandboxed job (its own uid) can search, like /tmp
    (pytest's tmp_path is 0700 root)."""
    folder = Path(tempfile.mkdtemp(prefix="orch-e2e-hold-"))
    folder.chmod(0o755)
    path = folder / "hold"
    path.touch()
    yield path
    shutil.rmtree(folder, ignore_errors=True)
