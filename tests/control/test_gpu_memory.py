"""The decision contract and the live pool view hold jobs to their ``gpu_memory_gb``."""

from __future__ import annotations

from orchestrator.control.invariants import check_decisions
from orchestrator.control.ledger import policy_nodes
from orchestrator.pool import GPUInfo, NodeInfo, gpu_memory_gb
from policies import Decision, DecisionKind, NodeView, QueuedJob, RunningJob, Snapshot

NODES = (NodeView("n24", 4, 3, 24.0), NodeView("n80", 4, 3, 80.0))
QUEUE = (QueuedJob("q", "bulk", "t", 1, 2, 0.0, gpu_memory_gb=40.0),)
# a job already on the small node (started before the pool changed): it may keep those GPUs
RUNNING = (
    RunningJob("r", "bulk", "t", ("n24",), seq=1, max_gpus=3, gpu_memory_gb=40.0),
    RunningJob("s", "bulk", "t", ("n80",), seq=0, max_gpus=3, gpu_memory_gb=40.0),
)
SNAP = Snapshot(NODES, QUEUE, RUNNING)


def test_a_start_on_a_too_small_node_breaks_the_contract() -> None:
    bad = Decision(DecisionKind.START, "q", nodes=("n24",))
    kept, broken = check_decisions(SNAP, [bad])
    assert not kept and "gpu_memory_gb (40 GB)" in broken[0][1] and "n24" in broken[0][1]
    ok = Decision(DecisionKind.START, "q", nodes=("n80",))
    assert check_decisions(SNAP, [ok]) == ([ok], [])


def test_a_resize_may_keep_gpus_on_a_small_node_but_take_no_new_ones() -> None:
    keep = Decision(DecisionKind.RESIZE, "r", nodes=("n24", "n80"))
    assert check_decisions(SNAP, [keep]) == ([keep], [])
    grow = Decision(DecisionKind.RESIZE, "s", nodes=("n80", "n24"))
    kept, broken = check_decisions(SNAP, [grow])
    assert not kept and "RESIZE" in broken[0][1].upper() and "gpu_memory_gb" in broken[0][1]


def test_the_live_pool_gives_the_policy_each_nodes_gpu_memory() -> None:
    nodes = [
        NodeInfo("a", "10.0.0.1", 2, virtual=True, gpu_memory_gb=24.0),
        NodeInfo("b", "10.0.0.2", 2, virtual=False, gpu_memory_gb=80.0),
    ]
    views = policy_nodes(nodes, [])
    assert [(v.node_id, v.gpu_memory_gb) for v in views] == [("a", 24.0), ("b", 80.0)]


def test_a_nodes_gpu_memory_is_declared_else_measured_else_the_virtual_setting() -> None:
    # NVML reads an "80 GB" H100 as 81559 MiB: 85.5 GB of 10^9 bytes, so a job asking 80 fits
    h100 = GPUInfo(0, "NVIDIA H100 80GB HBM3", 81559.0)
    l4 = GPUInfo(1, "NVIDIA L4", 23034.0)
    assert gpu_memory_gb((h100,), None, 16.0) >= 80.0
    assert gpu_memory_gb((h100, l4), None, 16.0) == 23034.0 * 2**20 / 1e9  # the smallest
    assert gpu_memory_gb((), None, 16.0) == 16.0
    assert gpu_memory_gb((h100,), 40.0, 16.0) == 40.0
