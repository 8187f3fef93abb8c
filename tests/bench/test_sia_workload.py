"""The Sia workload converter reads a small inline sample of the artifact's layout."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]

CONFIG = """\
cluster_ngpus_per_node = {"aws": 4, "azure" : 8, "dgx-ext": 8, "rtx": 8}
cluster_nnodes = {"aws": 6, "dgx-ext": 2, "rtx": 3}       # default for experiments
# cluster_nnodes = {"aws": 16}
cluster_max_physical_nnodes = {"azure": 5, "aws": 16, "dgx-ext": 2, "rtx": 3}
SLOWDOWNS = {"cifar10": 1.8, "bert": 1.2}
calibrate_cluster = 'rtx'
"""

WORKLOAD = """\
name,time,application,num_replicas,batch_size
cifar10-0,401.0,cifar10,12,4096
cifar10-1,528.0,cifar10,1,128
"""

# 1 GPU: batch 32 in 0.04 s and 64 in 0.08 s; 4 GPUs on one node; two nodes of 2.
PLACEMENTS = {
    "aws": "placement,local_bsz,step_time,sync_time\n"
    "1,32,0.04,0.0\n1,64,0.08,0.0\n4,64,0.1,0.02\n22,64,0.12,0.04\n",
    "dgx-ext": "placement,local_bsz,step_time,sync_time\n1,32,0.01,0.0\n1,128,0.02,0.0\n",
    "rtx": "placement,local_bsz,step_time,sync_time\n1,32,0.02,0.0\n1,64,0.04,0.0\n",
}
SCALABILITY = "num_nodes,num_replicas,local_bsz,step_time,sync_time\n2,5,64,0.2,0.1\n"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "sia_workload", ROOT / "bench/scheduler/sia/workload.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["sia_workload"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def simulator(tmp_path: Path) -> Path:
    sim = tmp_path / "sia-simulator"
    (sim / "workloads/saturn").mkdir(parents=True)
    (sim / "simulator_config.py").write_text(CONFIG)
    (sim / "workloads/saturn/workload-1.csv").write_text(WORKLOAD)
    app = sim / "traces/cifar10"
    app.mkdir(parents=True)
    for kind, text in PLACEMENTS.items():
        (app / f"placements-{kind}.csv").write_text(text)
        (app / f"scalability-{kind}.csv").write_text(SCALABILITY)
    for scale, bsz in ((1, 128), (2, 4096)):
        rows = "".join(f"{100.0 * scale * (e + 1)},{e},0.5,1.0,1.0\n" for e in range(100))
        (app / f"validation-{bsz}.csv").write_text(
            "progress,iteration,metric,grad_sqr,grad_var\n" + rows
        )
    return sim


def test_reads_workload_cluster_and_profiles(simulator: Path) -> None:
    w = _module()
    jobs, cluster, apps = w.read_trace(simulator, simulator / "workloads/saturn/workload-1.csv")

    assert [(j.name, j.submit_s, j.application, j.num_replicas, j.batch_size) for j in jobs] == [
        ("cifar10-0", 401.0, "cifar10", 12, 4096),
        ("cifar10-1", 528.0, "cifar10", 1, 128),
    ]
    # The uncommented assignment is the one in force; kinds outside the cluster are dropped.
    assert cluster.nodes == {"aws": 6, "dgx-ext": 2, "rtx": 3}
    assert cluster.gpus_per_node == {"aws": 4, "dgx-ext": 8, "rtx": 8}
    assert cluster.gpus == {"aws": 24, "dgx-ext": 16, "rtx": 24}
    assert cluster.max_physical_nodes == {"aws": 16, "dgx-ext": 2, "rtx": 3}

    cifar = apps["cifar10"]
    assert (cifar.init_batch_size, cifar.max_batch_size) == (128, 4096)
    assert cifar.max_epochs == 100 and cifar.rescale_s == 50 and cifar.slowdown == 1.8
    assert cifar.work == pytest.approx(100.0 * 100)  # progress after epoch 100, the smaller curve
    aws = cifar.profiles["aws"]
    # The simulator's bootstrap: largest 1-GPU batch over the longest 1-GPU step.
    assert aws.one_gpu_throughput == pytest.approx(64 / 0.08)
    assert cifar.profiles["dgx-ext"].one_gpu_throughput == pytest.approx(128 / 0.02)
    assert aws.local_bsz_range == (32, 64)
    assert (4,) in {r.placement for r in aws.rows} and (2, 2) in {r.placement for r in aws.rows}
    assert [(r.num_nodes, r.num_replicas) for r in aws.scale_rows] == [(2, 5)]
    assert cifar.max_gpus("aws") == min(64, 4096 // 32)


def test_step_time_interpolates_like_the_artifact(simulator: Path) -> None:
    w = _module()
    aws = w.read_profile(simulator / "traces/cifar10", "aws")
    assert aws.scale_rows[0].num_replicas == 5
    assert aws.step_time((1,), 48) == pytest.approx((0.06, 0.0))  # between 32 and 64
    assert aws.step_time((4,), 64) == pytest.approx((0.1, 0.02))
    assert aws.step_time((0, 2, 2), 64) == pytest.approx((0.12, 0.04))  # zeros dropped
    assert aws.step_time((1,), 128) is None  # beyond the measured batches
    assert aws.step_time((9, 9, 9), 64) is None  # outside every measurement
