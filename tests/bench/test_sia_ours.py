"""Sia's workloads in the project's simulator: an inline 3-job sample on Sia's kinds."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _ours() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sia_ours", ROOT / "bench/scheduler/sia/ours.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["sia_ours"] = module
    spec.loader.exec_module(module)
    return module


def _app(sia: ModuleType, one_gpu_step: dict[str, float]) -> object:
    """cifar10 with a 1-GPU batch of 64 taking the given seconds on each kind."""
    profiles = {
        k: sia.KindProfile(kind=k, rows=(sia.ProfileRow((1,), 64, s, 0.0),))
        for k, s in one_gpu_step.items()
    }
    return sia.Application("cifar10", 64, 4096, 1.0, 100, 50, 1.8, profiles)


def test_sample_builds_sias_cluster_and_gangs_stay_on_one_kind() -> None:
    ours = _ours()
    sia = sys.modules["workload"]
    from orchestrator.sim import SimConfig, Simulator

    apps = {"cifar10": _app(sia, {"aws": 0.08, "dgx-ext": 0.02, "rtx": 0.04})}
    cluster = sia.Cluster(
        nodes={"aws": 6, "dgx-ext": 2, "rtx": 3},
        gpus_per_node={"aws": 4, "dgx-ext": 8, "rtx": 8},
        max_physical_nodes={"aws": 16, "dgx-ext": 2, "rtx": 3},
    )
    jobs = [sia.SiaJob(f"cifar10-{i}", 100.0 * i, "cifar10", 1, 128) for i in range(3)]
    trace, nodes, kinds = ours.build(jobs, cluster, apps)

    assert ours.kind_speeds(apps) == {"cifar10": {"T4": 1.0, "A100": 4.0, "RTX": 2.0}}
    assert [t.kind_speed for t in trace] == ["T4:1.0000 A100:4.0000 RTX:2.0000"] * 3
    assert all(g == 4 for _, g in nodes) and len(nodes) == 16
    by_kind = {k: sum(1 for v in kinds.values() if v[0] == k) for k in ("T4", "A100", "RTX")}
    assert by_kind == {"T4": 6, "A100": 4, "RTX": 6}
    assert all(t.app == "cifar10" and t.batch_size == 0 and t.lo == 1 for t in trace)

    policy = ours.variants.create("shared")
    sim = Simulator(trace, policy, nodes, kinds=kinds, config=SimConfig(log_decisions=True))
    result = sim.run()
    assert all(r.completed_at is not None for r in result.records)
    gangs = [{kinds[n][0] for n in d.nodes} for _, d in sim.applied if d.nodes]
    # The first job starts on A100, its fastest kind; every gang stays on one kind (a job
    # arriving while A100 is full takes RTX, its next fastest).
    assert gangs[0] == {"A100"} and all(len(g) == 1 for g in gangs)
