"""Gang placement on a multi-node Ray cluster with virtual GPUs (real Ray, real Redis): Ray puts
a gang where the policy said and frees its GPUs on a cancel. (Queue order, a decision alone, is
tested on the in-process runtime: ``tests/control/test_scenarios.py``.)"""

from __future__ import annotations

import time

from ray.util.placement_group import placement_group_table

from orchestrator.store.states import JobState
from tests.e2e.conftest import Orch
from tests.e2e.jobs import HOLDER, mlp_job, state_events


def _bundle_nodes(job_id: str) -> set[str]:
    for pg in placement_group_table().values():
        if pg["name"] == f"orch-{job_id}" and pg["state"] == "CREATED":
            return set(pg["bundles_to_node_id"].values())
    return set()


def test_pack_keeps_a_4_gpu_job_on_one_node_and_a_job_that_cannot_fit_waits(orch: Orch) -> None:
    big = orch.store.submit(mlp_job("big", gpus=4, workload=HOLDER, duration_s=60)).id
    rec = orch.wait(big, {JobState.RUNNING})
    nodes = rec.placement["nodes"] if rec.placement else []
    assert len(nodes) == 4 and len(set(nodes)) == 1
    assert _bundle_nodes(big) == set(nodes)  # Ray put the gang where the policy said
    pool = orch.cli("pool")
    assert pool.returncode == 0, pool.stderr
    row = next(line for line in pool.stdout.splitlines() if nodes[0][:12] in line)
    cells = [c.strip() for c in row.split("│")[1:-1]]
    # node, address, GPUs, used, free, warm workers (timing-dependent), kind, GB per GPU
    assert cells[2:5] == ["4", "4", "0"], pool.stdout
    assert cells[6] == "virtual (CPU-backed)", pool.stdout

    wide = orch.store.submit(mlp_job("wide", gpus=3, steps=3)).id
    deadline = time.monotonic() + 30
    while "waiting" not in orch.store.get(wide).message and time.monotonic() < deadline:
        time.sleep(0.2)
    waiting = orch.store.get(wide)
    assert waiting.state is JobState.QUEUED
    assert waiting.message == "waiting: needs 3 GPUs; 2 free"

    out = orch.cli("cancel", big)
    assert out.returncode == 0, out.stderr
    assert orch.wait(big, {JobState.CANCELLED}).state is JobState.CANCELLED
    assert _bundle_nodes(big) == set()  # the placement group is gone: GPUs freed
    # The waiting job now fits (3 of node A's 4 GPUs) and runs to the end.
    done = orch.wait(wide, {JobState.FINISHED, JobState.FAILED})
    assert done.state is JobState.FINISHED, done.message
    assert done.placement is None
    states = [e["event"] for e in state_events(orch.store.events(wide))]
    assert states[-3:] == ["placed", "running", "finished"]
