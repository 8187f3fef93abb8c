"""The simulator holds jobs to their ``gpu_memory_gb`` as the live scheduler does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.sim import SimConfig, Simulator, TraceJob, UnplaceableJobs, read_trace
from orchestrator.sim.cli import load_nodes
from policies import SCHEDULING_POLICIES, DecisionKind

NODES = [("n24", 4), ("n80", 4)]
MEMORY = {"n24": 24.0, "n80": 80.0}
CONFIG = SimConfig(restart_s=0.0, sigma=0.0, log_decisions=True)


@pytest.mark.parametrize("policy", ["gang", "shared", "tiresias", "pollux"])
def test_jobs_needing_40_gb_run_only_on_the_80_gb_node(policy: str) -> None:
    jobs = [
        TraceJob(f"big{i}", submit_time=10.0 * i, gpus=2, duration=300, gpu_memory_gb=40.0)
        for i in range(3)
    ]
    jobs.append(TraceJob("any", submit_time=0.0, gpus=1, duration=300))
    sim = Simulator(jobs, SCHEDULING_POLICIES.create(policy), NODES, config=CONFIG,
                    gpu_memory_gb=MEMORY)  # fmt: skip
    result = sim.run()
    assert all(r.completed_at is not None for r in result.records)
    placed = [d for _, d in sim.applied if d.kind is not DecisionKind.PREEMPT]
    assert {d.job_id for d in placed} >= {"big0", "big1", "big2"}
    for d in placed:
        if d.job_id.startswith("big"):
            assert set(d.nodes) == {"n80"}, d


def test_a_job_no_node_can_hold_is_refused_naming_the_field() -> None:
    jobs = [TraceJob("huge", submit_time=0.0, gpus=1, duration=10, gpu_memory_gb=100.0)]
    with pytest.raises(UnplaceableJobs) as err:
        Simulator(jobs, SCHEDULING_POLICIES.create("gang"), NODES, gpu_memory_gb=MEMORY)
    assert "gpu_memory_gb" in str(err.value) and "huge" in str(err.value)


def test_traces_and_nodes_files_carry_gpu_memory(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("name,submit_time,gpus,duration,gpu_memory_gb\na,0,1,10,40\nb,0,1,10,\n")
    a, b = read_trace(trace)
    assert (a.gpu_memory_gb, b.gpu_memory_gb) == (40.0, None)
    old = tmp_path / "old.csv"  # a trace without the column still loads
    old.write_text("name,submit_time,gpus,duration\na,0,1,10\n")
    assert read_trace(old)[0].gpu_memory_gb is None
    nodes = tmp_path / "nodes.json"
    nodes.write_text(
        json.dumps([{"name": "x", "gpus": 2, "gpu_memory_gb": 24}, {"name": "y", "gpus": 2}])
    )
    assert [(n.name, n.gpu_memory_gb) for n in load_nodes(nodes)] == [("x", 24.0), ("y", None)]
