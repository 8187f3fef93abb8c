"""Elastic resize live (real Ray, Redis, torch): a bulk job grows when GPUs free up, shrinks
when an interactive job needs them, and trains on to the same end as an unresized run."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.runtime.harness_config import job_harness_config
from orchestrator.store.states import JobState
from tests.e2e.conftest import Orch
from tests.e2e.jobs import HOLDER, mlp_job
from workers.config import HarnessConfig
from workers.harness import Harness

STEPS = 500
# Every micro-batch of the elastic job sleeps 90 ms while the hold file exists (the wrapper
# changes no data): the job lives through the filler's end, a grow, an interactive start and a
# shrink sleeping instead of computing (6,000 computed steps used to take 110-160 s, and twice
# that on a shared machine), 45 s of sleep at least; once the shrink is seen, the hold is
# removed and the rest of the 500 steps run at full speed. (1,500 steps of 30 ms slept as
# long, then ran 1,160 steps flat out: 32 s of a 90 s test on a loaded machine.)
SLOW_MS = 90


def _gpus_now(o: Orch, job_id: str) -> int:
    placement = o.store.get(job_id).placement or {}
    return len(placement.get("nodes", []))


def _until(cond: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.mark.timeout(600)
def test_bulk_job_grows_then_shrinks_and_trains_on(shared: Orch, hold: Path) -> None:
    o = shared
    slowed = {
        "entry": "tests.e2e.slowed_workload:build",
        "args": {"slow_ms": SLOW_MS, "hold": str(hold)},
    }
    # 6 GPUs: a rigid 4-GPU job and an elastic one (1-4 GPUs, global batch 16 = 8 x 2 GPUs).
    # The filler only holds its 4 GPUs for 15 s, paced (its four ranks computing flat out took
    # the cores the jobs under test need)
    filler = o.store.submit(mlp_job("filler", gpus=4, workload=HOLDER, duration_s=15)).id
    spec = mlp_job(
        "elastic",
        gpus={"min": 1, "max": 4},
        workload=slowed,
        steps=STEPS,
        data_parallel=2,
        checkpoint_every=100,
    )
    job = o.store.submit(spec).id
    o.wait(job, {JobState.RUNNING})
    assert _gpus_now(o, job) == 2
    o.wait(filler, {JobState.FINISHED}, timeout_s=240)
    _until(
        lambda: _gpus_now(o, job) == 4 and o.store.get(job).state is JobState.RUNNING, 120, "grow"
    )

    # it holds its 4 GPUs to the test's end, paced: the elastic job's last steps are not
    # slowed by four ranks computing flat out
    notebook = mlp_job("notebook", cls="interactive", gpus=4, workload=HOLDER, duration_s=600)
    inter = o.store.submit(notebook).id
    o.wait(inter, {JobState.RUNNING, JobState.FINISHED}, timeout_s=120)
    assert _gpus_now(o, job) == 2  # gave two GPUs back rather than stopping
    hold.unlink()  # the rest of its steps at full speed

    end = o.wait(job, {JobState.FINISHED, JobState.FAILED}, timeout_s=400)
    assert end.state is JobState.FINISHED, end.message
    resizes = [e["message"] for e in o.store.events(job) if e["message"].startswith("resized")]
    assert resizes[:2] == ["resized from 2 to 4 GPUs; resumes", "resized from 4 to 2 GPUs; resumes"]
    assert end.result is not None and end.result["steps_done"] == STEPS
    assert end.result["resumed_from_step"] > 0

    # The same training without resizes: one process with the same global batch and seed
    # (and the same workload, not slowed).
    cfg = job_harness_config(spec)
    cfg["micro_batch"] *= 2
    cfg["workload_args"] = {**cfg["workload_args"], "slow_ms": 0}
    reference = Harness(HarnessConfig.from_dict(cfg), num_threads=1).run()
    assert math.isclose(end.result["loss"], reference.loss or 0.0, rel_tol=1e-3)
