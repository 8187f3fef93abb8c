"""Submission refuses a job whose ``resources.gpu_memory_gb`` no node of the pool has."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.errors import SpecError
from orchestrator.spec import JobSpec
from orchestrator.store import JobStore
from tests.orchestrator.test_store_kinds import _spec as kinds_spec

POOL = {
    "nodes": [
        {"node_id": "n24", "gpus": 4, "gpu_memory_gb": 24.0},
        {"node_id": "n80", "gpus": 2, "gpu_memory_gb": 80.0},
    ]
}


def _spec(gb: float, gpus: int = 1, name: str = "big") -> JobSpec:
    return kinds_spec(gpus, name, gpu_memory_gb=gb)


def test_a_job_no_node_can_hold_is_refused_naming_the_field(store: JobStore) -> None:
    store.pool_view.publish(POOL, ttl_ms=60_000)
    with pytest.raises(SpecError) as err:
        store.submit_many([_spec(40.0, name="fits"), _spec(100.0)])
    (problem,) = err.value.problems
    assert problem == (
        "job 'big': resources.gpu_memory_gb must be at most 80 (the pool's largest GPUs), got 100"
    )
    assert store.list() == []  # all or nothing
    with pytest.raises(SpecError, match=r"gpu_memory_gb is 40, which 2 GPU\(s\)"):
        store.submit(_spec(40.0, gpus=4))
    rec = store.submit(_spec(40.0, gpus=2))  # the 80 GB node holds it
    (facts,) = store.queue_facts([rec.id])
    assert facts["gpu_memory_gb"] == "40.0"  # what the snapshot reads


def test_with_no_pool_known_the_job_is_queued(store: JobStore) -> None:
    assert store.pool_view.read() is None  # no scheduler runs: it waits, saying why
    assert store.submit(_spec(100.0)).state.value == "queued"


def test_orch_submit_exits_2_with_one_line(
    store: JobStore, redis_url: str, namespace: str, tmp_path: Path
) -> None:
    store.pool_view.publish(POOL, ttl_ms=60_000)
    job = tmp_path / "big.yaml"
    job.write_text(
        "name: big\nteam: t\nclass: bulk\nworkload: mlp\n"
        "sla: {throughput: {min_samples_per_s: 1}}\nresources: {gpus: 1, gpu_memory_gb: 100}\n"
        "run: {steps: 10}\n"
    )
    env = {"REDIS_URL": redis_url, "ORCH_NAMESPACE": namespace, "ORCH_DATA_DIR": str(tmp_path)}
    exe = Path(sys.executable).parent / "orch"
    out = subprocess.run(
        [str(exe), "submit", str(job)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert "resources.gpu_memory_gb must be at most 80" in out.stderr
    assert "Traceback" not in out.stderr
