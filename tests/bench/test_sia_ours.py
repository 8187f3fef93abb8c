"""Sia's workloads in the project's simulator: an inline sample in the artifact's layout, built
as `ours.py` builds a workload and run under Gavel, Sia and `shared`."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from orchestrator.sim import SimConfig, Simulator

ROOT = Path(__file__).resolve().parents[2]

CONFIG = """\
cluster_ngpus_per_node = {"aws": 4, "dgx-ext": 8, "rtx": 8}
cluster_nnodes = {"aws": 6, "dgx-ext": 2, "rtx": 3}
cluster_max_physical_nnodes = {"aws": 16, "dgx-ext": 2, "rtx": 3}
SLOWDOWNS = {"cifar10": 1.8}
"""
# batch 32 and 64 on one and two GPUs of each kind (64 is the largest batch: no job uses more
# than 2 GPUs); A100 4x and RTX 2x as fast as T4
STEP_S = {"aws": 0.08, "dgx-ext": 0.02, "rtx": 0.04}
WORKLOAD = "name,time,application,num_replicas,batch_size\n" + "".join(
    f"cifar10-{i},{100.0 * i},cifar10,1,64\n" for i in range(3)
)


def _ours() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sia_ours", ROOT / "bench/scheduler/sia/ours.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["sia_ours"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def sample(tmp_path: Path) -> Path:
    sim = tmp_path / "sia-simulator"
    (sim / "workloads/saturn").mkdir(parents=True)
    (sim / "simulator_config.py").write_text(CONFIG)
    (sim / "workloads/saturn/workload-1.csv").write_text(WORKLOAD)
    app = sim / "traces/cifar10"
    app.mkdir(parents=True)
    for kind, step in STEP_S.items():
        (app / f"placements-{kind}.csv").write_text(
            "placement,local_bsz,step_time,sync_time\n"
            f"1,32,{step / 2},0.0\n1,64,{step},0.0\n"
            f"2,32,{step / 2 + 0.005},0.005\n2,64,{step + 0.005},0.005\n"
        )
        (app / f"scalability-{kind}.csv").write_text(
            "num_nodes,num_replicas,local_bsz,step_time,sync_time\n"
        )
    rows = "".join(f"{1.0 * (e + 1)},{e},0.5,1.0,1.0\n" for e in range(100))
    (app / "validation-64.csv").write_text("progress,iteration,metric,grad_sqr,grad_var\n" + rows)
    return sim


def test_a_workload_runs_under_gavel_sia_and_shared_on_sias_cluster(sample: Path) -> None:
    ours = _ours()
    sia = sys.modules["workload"]
    jobs, cluster, apps = sia.read_trace(sample, sample / "workloads/saturn/workload-1.csv")

    trace, nodes, kinds, models, sia_policy = ours.build_adaptive(jobs, cluster, sample, apps)
    # the cluster's real node shapes, under the artifact's kind names
    assert sorted((n, g) for n, g in nodes if n.endswith("-0")) == [
        ("aws-0", 4),
        ("dgx-ext-0", 8),
        ("rtx-0", 8),
    ]
    assert len(nodes) == 11 and sum(g for _, g in nodes) == 64
    # each job's speed per kind: its application's one-GPU throughput over T4's
    assert trace[0].kind_speed == "aws:1.0 dgx-ext:4.0 rtx:2.0"
    assert all((t.lo, t.hi) == (1, 2) for t in trace)  # batch 64 at most, 32 a GPU at least

    for name in ("sia", "shared"):
        trace, nodes, kinds, models, sia_policy = ours.build_adaptive(jobs, cluster, sample, apps)
        policy = sia_policy if name == "sia" else ours.variants.create("shared")
        config = SimConfig(interval_s=60.0, atomic_moves=name == "sia", log_decisions=True)
        sim = Simulator(trace, policy, nodes, config=config, kinds=kinds, models=models)
        result = sim.run()
        assert all(r.completed_at is not None for r in result.records)
        # every gang on one kind; `shared` starts the first job on its fastest (Sia, knowing
        # nothing of a job before it runs, values one GPU of every kind alike)
        gangs = [{kinds[n][0] for n in d.nodes} for _, d in sim.applied if d.nodes]
        assert all(len(g) == 1 for g in gangs)
        assert name == "sia" or gangs[0] == {"dgx-ext"}

    rigid, nodes, kinds, fixed = ours.build_rigid(jobs, cluster, sample)
    assert [t.kind_speed for t in rigid] == ["aws:1.0 dgx-ext:4.0 rtx:2.0"] * 3
    gavel = ours.GavelPolicy(interval_s=360.0)
    config = SimConfig(interval_s=360.0, atomic_moves=True)
    result = Simulator(rigid, gavel, nodes, config=config, kinds=kinds, models=fixed).run()
    assert all(r.completed_at is not None for r in result.records)
