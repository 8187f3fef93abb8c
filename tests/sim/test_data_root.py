"""A data folder given as ``root`` / ``traces_root`` / ``--data`` reaches every loader.

The Pollux data is copied to a temporary folder and the default lookup is pointed at nothing,
with every cache that could hold a profile read from the default cleared: any loader that falls
back to the default then raises instead of silently reading the bundled copy.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.sim import (
    SimConfig,
    Simulator,
    TraceError,
    models,
    philly_jobs,
    pollux_workload,
    profiles,
    trace,
)
from orchestrator.sim.engine import uniform_pool
from orchestrator.sim.profiles import BUNDLED_TRACES, TRACES_ENV, traces_dir
from policies import SCHEDULING_POLICIES
from tests.sim.test_fidelity import HAVE_TRACES

pytestmark = pytest.mark.skipif(not HAVE_TRACES, reason="Pollux traces not found")


def _clear_caches() -> None:
    profiles.load_app.cache_clear()
    profiles._best_config_cached.cache_clear()
    models._speedups.cache_clear()
    trace._philly_rows.cache_clear()


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A copy of the data (apps, one workload, the head of the Philly extract); the default
    lookup points at a folder that does not exist."""
    root = tmp_path / "pollux"
    shutil.copytree(BUNDLED_TRACES / "apps", root / "apps")
    (root / "workloads").mkdir()
    shutil.copy(BUNDLED_TRACES / "workloads" / "workload-3.csv", root / "workloads")
    head = (BUNDLED_TRACES / "philly.csv").read_text().splitlines()[:200]
    (root / "philly.csv").write_text("\n".join(head) + "\n")
    monkeypatch.setenv(TRACES_ENV, str(tmp_path / "nowhere"))
    _clear_caches()
    with pytest.raises(TraceError):
        traces_dir()  # the fallback is gone
    yield root
    _clear_caches()  # nothing read from the copy outlives the test


def test_every_loader_reads_the_given_root(data: Path) -> None:
    # adaptive jobs: best configurations and speedup tables (both cached per app and root)
    adaptive = pollux_workload("workload-3", adaptive=True, root=data)[:6]
    assert {j.app for j in adaptive} >= {"cifar10", "ncf"}
    cfg = SimConfig(every_round=False, horizon_s=4 * 3600.0)
    shared = SCHEDULING_POLICIES.create("shared")
    res = Simulator(adaptive, shared, uniform_pool(4, 4), config=cfg, traces_root=str(data)).run()
    assert res.rounds > 0 and res.summary()["completed"] > 0
    # hand-tuned jobs: fixed batch and GPUs
    fixed = pollux_workload("workload-3", root=data)[:4]
    tiresias = SCHEDULING_POLICIES.create("tiresias")
    res = Simulator(fixed, tiresias, uniform_pool(4, 4), config=cfg, traces_root=str(data)).run()
    assert res.summary()["completed"] > 0
    assert len(philly_jobs(5, path=data / "philly.csv")) == 5
    with pytest.raises(TraceError, match="Pollux workload not found"):
        pollux_workload("workload-3", load=0.5, root=data)  # not copied: no fallback either


def test_a_missing_profile_under_root_is_a_trace_error(data: Path) -> None:
    shutil.rmtree(data / "apps" / "bert")
    with pytest.raises(TraceError, match="no profile of 'bert'"):
        profiles.load_app("bert", str(data))


def test_orch_sim_data_option(data: Path, tmp_path: Path) -> None:
    t = tmp_path / "apps.csv"
    t.write_text("name,submit_time,gpus,app,batch_size\nc1,0,2,cifar10,256\nn1,30,1,ncf,32768\n")
    args = ["--pool", "2x4", "--policy", "gang", "--data", str(data), "--skip-idle"]
    out = subprocess.run(
        [str(Path(sys.executable).parent / "orch"), "sim", str(t), *args, "--out", str(tmp_path)],
        env={**os.environ, TRACES_ENV: str(tmp_path / "nowhere")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["policies"]["gang"]["summary"]["completed"] == 2
