"""Preemption live: an interactive job on a full pool makes a bulk job give way (real Ray, Redis,
torch); the bulk job resumes from its checkpoint and ends as if it had never been stopped."""

from __future__ import annotations

import math
import time

from orchestrator.runtime.harness_config import job_harness_config
from orchestrator.spec import JobSpec
from orchestrator.store.states import JobState
from tests.e2e.conftest import QUICK_RESTART_S, Orch
from tests.e2e.jobs import mlp_job
from workers.config import HarnessConfig
from workers.harness import Harness

STEPS = 400
PACE_MS = 25
# Both bulk jobs sleep 25 ms before each step (``pace_ms``: the data, and so the training, is
# the same): still mid-run, 360 steps and 9 s or more from their end, when the interactive job
# (submitted once both have done 40 steps) needs room a round later, with their six ranks
# mostly asleep on the test machine's two cores (1,000 steps computed flat out took 51 s).


def _bulk(name: str, gpus: int) -> JobSpec:
    paced = {"name": "mlp", "args": {"pace_ms": PACE_MS}}
    return mlp_job(name, gpus=gpus, workload=paced, steps=STEPS, checkpoint_every=20)


def _steps(o: Orch, job_id: str) -> int:
    return int(o.store.metrics(job_id).get("step", 0))


def test_interactive_job_preempts_bulk_which_resumes_to_the_same_end(shared: Orch) -> None:
    o = shared
    o.running.scheduler.restart_cost_s = QUICK_RESTART_S  # the victim resumes, not waits 30 s
    # Fill the pool (node A: 4 GPUs, node B: 2) with two bulk jobs.
    big = o.store.submit(_bulk("big", gpus=4)).id
    small = o.store.submit(_bulk("small", gpus=2)).id
    for job_id in (big, small):
        o.wait(job_id, {JobState.RUNNING})
    deadline = time.monotonic() + 120
    while min(_steps(o, big), _steps(o, small)) < 40 and time.monotonic() < deadline:
        time.sleep(0.2)

    inter = o.store.submit(mlp_job("notebook", cls="interactive", steps=30)).id
    rec = o.wait(inter, {JobState.RUNNING, JobState.FINISHED}, timeout_s=120)
    assert rec.state in (JobState.RUNNING, JobState.FINISHED)

    ends = {j: o.wait(j, {JobState.FINISHED, JobState.FAILED}, timeout_s=300) for j in (big, small)}
    assert o.wait(inter, {JobState.FINISHED}).state is JobState.FINISHED
    preempted = [
        j
        for j in (big, small)
        if any("preempted" in e.get("message", "") for e in o.store.events(j))
    ]
    assert len(preempted) == 1, {j: o.store.events(j) for j in (big, small)}
    victim = ends[preempted[0]]
    assert victim.state is JobState.FINISHED, victim.message
    assert victim.result is not None
    assert victim.result["steps_done"] == STEPS
    assert 20 <= victim.result["resumed_from_step"] < STEPS

    # The same job uninterrupted: one process with the same global batch and seed (data
    # parallelism averages gradients, so this is the same training run).
    cfg = job_harness_config(victim.spec)
    cfg["micro_batch"] *= victim.gpus
    cfg["workload_args"] = {**cfg["workload_args"], "pace_ms": 0}
    reference = Harness(HarnessConfig.from_dict(cfg), num_threads=1).run()
    assert math.isclose(victim.result["loss"], reference.loss or 0.0, rel_tol=1e-3)
    assert math.isclose(
        victim.result["param_fingerprint"], reference.param_fingerprint, rel_tol=1e-4
    )
