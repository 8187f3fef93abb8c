"""The control loop on the in-process runtime, against the real Redis: each phase's effect on
job state, the ledger, and the regressions of runs interrupted by a new decision."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from orchestrator.config import Settings
from orchestrator.control.loop import ControlLoop
from orchestrator.control.transitions import MAX_ATTEMPTS
from orchestrator.runtime.base import OutcomeKind
from orchestrator.runtime.local import LocalRuntime
from orchestrator.services import make_policy
from orchestrator.spec import JobSpec, parse_spec
from orchestrator.store import JobStore
from orchestrator.store.states import JobState
from policies import Decision, DecisionKind
from tests.e2e.jobs import state_events

S = JobState


def job(name: str, cls: str = "bulk", gpus: Any = 1, **extra: Any) -> JobSpec:
    sla = {"throughput": {"min_samples_per_s": 1}} if cls == "bulk" else {"latency": {"max_ms": 50}}
    data = {
        "name": name,
        "team": "t",
        "class": cls,
        "workload": "mlp",
        "sla": sla,
        "resources": {"gpus": gpus},
        "run": {"steps": 20, "micro_batch": 8},
    }
    return parse_spec({**data, **extra})


@pytest.fixture
def make_loop(store: JobStore, tmp_path: Path) -> Iterator[Any]:
    loops: list[ControlLoop] = []

    def make(
        nodes: list[tuple[str, int]], policy: str = "gang", **runtime: bool
    ) -> tuple[ControlLoop, LocalRuntime]:
        settings = Settings(redis_url="unused", namespace=store.namespace, data_dir=tmp_path)
        rt = LocalRuntime(nodes, **runtime)
        loop = ControlLoop(settings, store, rt, make_policy(policy))
        loop.lease.acquire(store.namespace)
        loops.append(loop)
        return loop, rt

    yield make
    for loop in loops:
        loop.lease.release()


def events(store: JobStore, job_id: str) -> list[str]:
    return [e["event"] for e in state_events(store.events(job_id))]


def test_a_job_is_placed_runs_and_finishes_with_its_service_recorded(
    store: JobStore, make_loop: Any
) -> None:
    loop, rt = make_loop([("n0", 2)])
    job_id = store.submit(job("a", gpus=2)).id
    loop.round()
    assert [launch.job_id for launch in rt.launches] == [job_id]
    assert rt.launches[0].nodes == ("n0", "n0") and rt.launches[0].kind == "run"
    assert store.get(job_id).state is S.PLACED  # the loop records "running" when it reaps
    loop.round()
    rec = store.get(job_id)
    assert rec.state is S.RUNNING and rec.attempts == 1
    rt.end(job_id, OutcomeKind.FINISHED, result={"samples_per_s": 10.0, "world_size": 2})
    loop.round()
    rec = store.get(job_id)
    assert rec.state is S.FINISHED and rec.message.startswith("SLA")
    assert events(store, job_id)[-4:] == ["queued", "placed", "running", "finished"]
    assert float(rec.fields["attained_gpu_s"]) >= 0.0 and rec.placement is None
    assert not loop.runs and not rt.alive()


def test_each_runs_gpu_seconds_reach_the_job_and_its_teams_account(
    store: JobStore, make_loop: Any
) -> None:
    from orchestrator.api import operations
    from orchestrator.api.identity import Principal

    loop, rt = make_loop([("n0", 2)])
    job_id = store.submit(job("a", gpus=2)).id
    loop.round()
    loop.round()
    time.sleep(0.3)
    rt.end(job_id, OutcomeKind.FINISHED, result={"samples_per_s": 10.0, "world_size": 2})
    loop.round()
    loop.telemetry.flush()
    held = float(store.get(job_id).fields["attained_gpu_s"])
    assert held >= 2 * 0.3  # two GPUs held for at least the sleep
    report = operations.usage(store, Principal.local(), since=0.0)
    assert [(r.id, r.gpu_s) for r in report.jobs] == [(job_id, held)]
    assert report.teams == {"t": held}
    assert report.accounts["t"] == pytest.approx(held)


def test_only_runs_lost_after_starting_count_towards_giving_up(
    store: JobStore, make_loop: Any
) -> None:
    loop, rt = make_loop([("n0", 1)], auto_start=False)
    job_id = store.submit(job("lossy")).id
    loop.round()
    rt.end(job_id, OutcomeKind.LOST, "Ray could not place the gang")  # never started
    loop.reap(rt.poll())
    rec = store.get(job_id)
    assert rec.state is S.QUEUED and "losses" not in rec.fields
    for n in range(1, MAX_ATTEMPTS + 1):
        loop.round()  # placed again
        rt.start(job_id)
        loop.round()
        assert store.get(job_id).state is S.RUNNING
        rt.end(job_id, OutcomeKind.LOST, "worker lost")
        loop.reap(rt.poll())
        rec = store.get(job_id)
        if n < MAX_ATTEMPTS:
            assert (rec.state, rec.fields["losses"]) == (S.QUEUED, str(n))
    assert rec.state is S.FAILED
    assert rec.message == f"gave up after {MAX_ATTEMPTS} attempts: worker lost"


def test_a_cancel_reaches_the_run_and_frees_its_gpus(store: JobStore, make_loop: Any) -> None:
    loop, rt = make_loop([("n0", 1)])
    first = store.submit(job("first")).id
    second = store.submit(job("second")).id
    loop.round()
    loop.round()
    store.transition(first, S.CANCELLING, message="cancelled by someone")
    loop.round()  # forwards the cancel: the run stops (at once here) and ends
    assert rt.stops == [first]
    loop.round()  # reaps it; the freed GPU goes to the next job
    assert store.get(first).state is S.CANCELLED
    assert store.get(second).state in (S.PLACED, S.RUNNING)


def test_a_job_cancelled_before_its_workers_start_is_stopped_not_run(
    store: JobStore, make_loop: Any
) -> None:
    loop, rt = make_loop([("n0", 1)], auto_start=False, stop_ends=False)
    job_id = store.submit(job("quick")).id
    loop.round()
    store.transition(job_id, S.CANCELLING)
    rt.start(job_id)  # the workers came up after the cancel
    loop.round()
    assert rt.stops == [job_id]
    rt.end(job_id, OutcomeKind.STOPPED, "stopped on request")
    loop.round()
    assert store.get(job_id).state is S.CANCELLED


def test_a_start_waits_while_its_gpus_are_still_being_freed(
    store: JobStore, make_loop: Any
) -> None:
    loop, rt = make_loop([("n0", 1)], policy="shared", stop_ends=False)
    victim = store.submit(job("victim")).id
    loop.round()
    loop.round()
    other = store.submit(job("other")).id
    free = {"n0": 0}
    loop.bind(Decision(DecisionKind.PREEMPT, victim, reason="test"), free)
    loop.bind(Decision(DecisionKind.START, other, nodes=("n0",)), free)
    assert store.get(other).state is S.QUEUED  # the victim still holds the GPU
    assert "being freed" in store.get(other).message
    rt.end(victim, OutcomeKind.STOPPED, "stopped", {"status": "stopped"})
    loop.reap(rt.poll())
    rec = store.get(victim)
    assert rec.state is S.QUEUED and rec.message.startswith("requeued: preempted: test")
    assert float(rec.fields["preempted_at"]) > 0
    loop.round()  # the job preempted to make room is not placed again in its room
    assert [launch.job_id for launch in rt.launches] == [victim, other]


def elastic(name: str) -> JobSpec:
    return job(name, gpus={"min": 1, "max": 4})


def test_a_grow_then_a_shrink_before_the_new_gang_starts_ends_in_a_legal_state(
    store: JobStore, make_loop: Any
) -> None:
    """Live, this left an elastic job placed for good (4 GPUs idle): a resize to 4, and before
    the 4-GPU gang had started, a resize back to 2."""
    loop, rt = make_loop([("n0", 4)], auto_start=False)
    job_id = store.submit(elastic("stretchy")).id
    loop.bind(Decision(DecisionKind.START, job_id, nodes=("n0", "n0")), {"n0": 4})
    rt.start(job_id)
    loop.round()
    assert store.get(job_id).state is S.RUNNING
    loop.bind(Decision(DecisionKind.RESIZE, job_id, nodes=("n0",) * 4), {"n0": 2})
    loop.reap(rt.poll())  # the 2-GPU run stopped; the 4-GPU gang is launched, not started
    assert store.get(job_id).state is S.PLACED and rt.launches[-1].nodes == ("n0",) * 4
    loop.bind(Decision(DecisionKind.RESIZE, job_id, nodes=("n0", "n0")), {"n0": 0})
    loop.reap(rt.poll())
    rec = store.get(job_id)
    assert rec.state is S.QUEUED and rec.message == "requeued: resized before it started"
    assert not loop.runs and not rt.alive()  # nothing holds GPUs for it
    loop.round()
    assert store.get(job_id).state is S.PLACED  # and it is placed again


def test_stopping_the_loop_requeues_its_jobs(store: JobStore, make_loop: Any) -> None:
    loop, _ = make_loop([("n0", 2)])
    a = store.submit(job("a")).id
    b = store.submit(job("b")).id
    loop.round()
    loop.round()
    loop.release(grace_s=5)
    for job_id in (a, b):
        rec = store.get(job_id)
        assert rec.state is S.QUEUED and "scheduler stopped" in rec.message
    assert store.lease_holder() is None


def test_a_tuning_run_is_a_state_and_its_answer_requeues_the_job_tuned(
    store: JobStore, make_loop: Any
) -> None:
    loop, rt = make_loop([("n0", 1)])
    spec = job("tuned", tuning={"enabled": True})
    job_id = store.submit(spec).id
    loop.round()
    assert rt.launches[-1].kind == "tune"
    loop.round()
    assert store.get(job_id).state is S.TUNING
    answer = {"run": True, "config": {"micro_batch": 32, "gpus": 1}, "cache": "miss", "trials": 3}
    rt.end(job_id, OutcomeKind.FINISHED, "tuned", answer)
    loop.round()  # requeued with its settings, and started again as a run
    rec = store.get(job_id)
    assert "tuned" in rec.fields
    assert events(store, job_id)[2:5] == ["placed", "tuning", "queued"]
    loop.round()
    launch = rt.launches[-1]
    assert launch.kind == "run" and launch.spec.run.micro_batch == 32


def test_a_job_preempted_for_an_interactive_one_does_not_preempt_another_bulk_job(
    store: JobStore, make_loop: Any
) -> None:
    """Live regression: the interactive job's victim (the 4-GPU job, which had lost the least
    work) was requeued and, two rounds later, preempted the young 2-GPU job of its own team to
    get back in: two preemptions for one interactive start."""
    import time

    from orchestrator.runtime.base import OutcomeKind as K

    loop, rt = make_loop([("A", 4), ("B", 2)], policy="shared", stop_ends=False)
    big = store.submit(job("big", gpus=4)).id
    small = store.submit(job("small", gpus=2)).id
    loop.round()
    loop.round()
    time.sleep(1.0)  # both have run a while
    for job_id, since_ckpt in ((big, 0.01), (small, 0.5)):  # big has less work to lose
        now = time.time()
        progress = {"step": 40, "total_steps": 2000, "global_batch": 8, "samples_per_s": 100.0}
        store.put_metrics(
            job_id, {"first_step_at": now - 1, "checkpoint_at": now - since_ckpt, **progress}
        )
    store.submit(job("notebook", cls="interactive"))
    loop.round()
    assert rt.stops == [big]
    rt.end(big, K.STOPPED, "stopped", {"status": "stopped"})
    for _ in range(6):
        loop.round()
        time.sleep(0.1)
    assert rt.stops == [big]  # small kept its GPUs
    assert store.get(small).state is S.RUNNING and store.get(big).state is S.QUEUED


def test_a_start_cancelled_since_the_snapshot_gives_all_its_gpus_back(
    store: JobStore, make_loop: Any
) -> None:
    loop, rt = make_loop([("n0", 4)])
    gone = store.submit(job("gone", gpus=2)).id
    store.transition(gone, S.CANCELLED)
    free = {"n0": 4}
    loop.bind(Decision(DecisionKind.START, gone, nodes=("n0", "n0")), free)
    assert free == {"n0": 4} and not rt.launches


def test_a_bulk_run_with_no_step_is_stopped_at_once_and_one_that_stepped_checkpoints(
    store: JobStore, make_loop: Any
) -> None:
    loop, rt = make_loop([("n0", 2)], policy="shared", stop_ends=False)
    fresh = store.submit(job("fresh")).id
    stepped = store.submit(job("stepped")).id
    loop.round()
    loop.round()
    now = time.time()
    store.put_metrics(stepped, {"first_step_at": now, "checkpoint_at": now, "step": 1})
    loop.observe()  # reads the runs' progress
    for job_id in (fresh, stepped):
        loop.bind(Decision(DecisionKind.PREEMPT, job_id, reason="test"), {"n0": 0})
    assert rt.stops == [fresh, stepped]
    assert rt.killed == [fresh]  # nothing to save: no set-up to wait for


def test_a_retune_asked_for_stops_the_run_and_tunes_it_again_from_its_window(
    store: JobStore, make_loop: Any
) -> None:
    loop, rt = make_loop([("n0", 1)])
    job_id = store.submit(job("drifts", tuning={"enabled": True})).id
    loop.round()
    loop.round()
    tuned = {"micro_batch": 32, "gpus": 1}
    rt.end(job_id, OutcomeKind.FINISHED, "tuned", {"run": True, "config": tuned, "trials": 3})
    loop.round()
    loop.round()
    assert store.get(job_id).state is S.RUNNING
    store.put_metrics(
        job_id,
        {"first_step_at": time.time(), "window_samples_per_s": 40.0, "window_p95_ms": 9.0},
    )
    store.request_tune(job_id)
    loop.round()  # stopped (the local runtime ends it at once), requeued to be tuned again
    loop.round()
    rec = store.get(job_id)
    # asked by its team: not one of the re-tunes the guard itself may give (guard_max_retunes)
    assert rec.fields["tuned"] == "" and int(rec.fields.get("retunes") or 0) == 0
    assert json.loads(rec.fields["retune"]) == {
        "config": tuned,
        "measured": {"samples_per_s": 40.0, "p50_ms": None, "p95_ms": 9.0, "p99_ms": None},
        "asked": True,
    }
    assert rt.launches[-1].kind == "tune"  # placed again: a tuning run, from that point
    messages = [e["message"] for e in store.events(job_id)]
    assert any(
        m.startswith("guard: re-tuning from the measured data (its team asked") for m in messages
    )
    assert any(m.startswith("requeued: re-tuning") for m in messages)
    # a request for a job that is not running is dropped, and the job is told
    store.request_tune(job_id)
    loop.round()
    assert store.get(job_id).fields["tuned"] == ""
    assert "re-tune not done" in store.events(job_id)[-1]["message"]


def test_shared_genetic_makes_room_for_a_newcomer_by_resizing_in_the_live_loop(
    store: JobStore, make_loop: Any
) -> None:
    """``ORCH_POLICY=shared-genetic`` through the live snapshot, decisions and binding: an
    elastic job alone on the pool takes all of it, and gives a newcomer its minimum by a
    resize (no 5-minute protection in this setting), both then running."""
    loop, _ = make_loop([("n0", 4)], policy="shared-genetic")
    first = store.submit(elastic("first")).id
    loop.round()
    loop.round()
    rec = store.get(first)
    assert rec.state is S.RUNNING and len((rec.placement or {})["nodes"]) == 4
    now = time.time()
    store.put_metrics(first, {"first_step_at": now, "checkpoint_at": now, "step": 5})
    second = store.submit(elastic("second")).id
    for _ in range(4):
        loop.round()
    held = {j: len((store.get(j).placement or {}).get("nodes", [])) for j in (first, second)}
    assert all(store.get(j).state is S.RUNNING for j in (first, second)), held
    assert held[second] >= 1 and 1 <= held[first] < 4 and sum(held.values()) <= 4
    assert any(m.startswith("resized from 4 to") for m in _messages(store, first))


def _messages(store: JobStore, job_id: str) -> list[str]:
    return [e["message"] for e in store.events(job_id)]


def test_a_resize_runs_the_plan_the_jobs_trials_picked_for_the_new_size(
    store: JobStore, make_loop: Any
) -> None:
    """A gpt job under dp 2 x tp 2 on 4 GPUs, shrunk to 2: its profile measured pipeline
    parallelism fastest on 2 ranks at its global batch, so the new gang runs pp 2 (the old rule
    kept tp 2), with the global batch kept and the choice in the job's message."""
    loop, rt = make_loop([("n0", 4)], auto_start=False)
    gpt = {"name": "gpt", "args": {"n_layer": 2, "d_model": 32, "n_head": 4, "seq_len": 16}}
    plan = {"dp": 2, "tp": 2, "zero": 3}
    spec = job("planned", gpus={"min": 2, "max": 4}, workload=gpt)
    run = {"steps": 20, "micro_batch": 2, "grad_accum": 2, "data_parallel": 4, "plan": plan}
    spec = parse_spec({**spec.model_dump(by_alias=True, exclude_none=True), "run": run})
    job_id = store.submit(spec).id
    trial = {"gpus": 2, "micro_batch": 2, "grad_accum": 4, "precision": "fp32", "status": "ok"}
    curves = [
        {**trial, "tp": 2, "samples_per_s": 10.0, "p95_ms": 900.0},
        {**trial, "pp": 2, "samples_per_s": 30.0, "p95_ms": 300.0},
    ]
    store.profiles.save(job_id, {"curves": {"fp32": curves}})
    loop.bind(Decision(DecisionKind.START, job_id, nodes=("n0",) * 4), {"n0": 4})
    rt.start(job_id)
    loop.round()
    assert rt.launches[-1].spec.run.plan == spec.run.plan  # the requested size: as submitted
    loop.bind(Decision(DecisionKind.RESIZE, job_id, nodes=("n0", "n0")), {"n0": 0})
    loop.reap(rt.poll())
    sized = rt.launches[-1].spec
    assert rt.launches[-1].nodes == ("n0", "n0") and sized.run.plan is not None
    assert (sized.run.plan.dp, sized.run.plan.tp, sized.run.plan.pp) == (1, 1, 2)
    assert (sized.run.micro_batch, sized.run.grad_accum) == (2, 4)  # 8 a step, as on 4 GPUs
    assert store.get(job_id).message.startswith("on 2 GPUs: measured pp 2")


def test_a_pipeline_job_shrinks_to_a_size_only_its_trials_make_possible(
    store: JobStore, make_loop: Any
) -> None:
    """A gpt job under pp 2 on 2 GPUs, range 1-2: the rule (tp and pp kept) cannot run it on
    one GPU, so with no profile its only size is 2; once its profile measured one GPU at its
    global batch, 1 is a size too, and a shrink to one GPU runs the measured config."""
    loop, rt = make_loop([("n0", 2)], auto_start=False)
    gpt = {"name": "gpt", "args": {"n_layer": 2, "d_model": 32, "n_head": 4, "seq_len": 16}}
    spec = job("piped", gpus={"min": 1, "max": 2}, workload=gpt)
    run = {"steps": 20, "micro_batch": 4, "grad_accum": 2, "data_parallel": 2, "plan": {"pp": 2}}
    spec = parse_spec({**spec.model_dump(by_alias=True, exclude_none=True), "run": run})
    job_id = store.submit(spec).id
    assert loop.facts.sizes(job_id) == [2]
    one = {"gpus": 1, "micro_batch": 8, "grad_accum": 1, "precision": "fp32", "status": "ok"}
    store.profiles.save(job_id, {"curves": {"fp32": [{**one, "samples_per_s": 50.0}]}})
    loop.facts.forget(job_id)
    assert loop.facts.sizes(job_id) == [1, 2]
    loop.bind(Decision(DecisionKind.START, job_id, nodes=("n0", "n0")), {"n0": 2})
    rt.start(job_id)
    loop.round()
    assert rt.launches[-1].nodes == ("n0", "n0")
    loop.bind(Decision(DecisionKind.RESIZE, job_id, nodes=("n0",)), {"n0": 0})
    loop.reap(rt.poll())
    sized = rt.launches[-1].spec
    assert rt.launches[-1].nodes == ("n0",) and sized.gpus == 1
    assert (sized.run.micro_batch, sized.run.grad_accum) == (8, 1)  # 8 a step, as on 2 GPUs
    assert sized.run.plan is None or sized.run.plan.pp == 1


def test_a_job_tuned_to_one_gpu_and_given_two_runs_a_measured_two_gpu_config_and_says_so(
    store: JobStore, make_loop: Any
) -> None:
    """Issue 37: a job tuned to one GPU (a cost goal: its 1-GPU config beat every 2-GPU one)
    and placed on two ran by rule (the micro-batch kept) although its profile held measured
    2-GPU configs of its global batch, and ``orch list`` / ``orch show`` said 1 GPU. Now the
    best measured 2-GPU config runs, an event names it, and both views say 2 GPUs."""
    from orchestrator.cli.views import verdicts_table
    from orchestrator.sla import SLAVerdict
    from tests.orchestrator.test_views import render_show

    loop, rt = make_loop([("n0", 2)], auto_start=False)
    spec = job("tuned1", gpus={"min": 1, "max": 2}, tuning={"enabled": True})
    job_id = store.submit(spec).id
    answer = {"run": True, "config": {"micro_batch": 32, "gpus": 1}, "cache": "miss", "trials": 5}
    loop.bind(Decision(DecisionKind.START, job_id, nodes=("n0",)), {"n0": 2})
    rt.end(job_id, OutcomeKind.FINISHED, "tuned", answer)
    loop.reap(rt.poll())  # requeued tuned: 32 x 1 on one GPU
    trial = {"precision": "fp32", "status": "ok", "p95_ms": 40.0}
    curves = [
        {**trial, "gpus": 1, "micro_batch": 32, "samples_per_s": 265.0},
        {**trial, "gpus": 2, "micro_batch": 16, "samples_per_s": 72.0},
        {**trial, "gpus": 2, "micro_batch": 8, "grad_accum": 2, "samples_per_s": 190.0},
        {**trial, "gpus": 2, "micro_batch": 4, "grad_accum": 4, "samples_per_s": 120.0},
    ]
    store.profiles.save(job_id, {"curves": {"fp32": curves}})
    loop.facts.forget(job_id)
    loop.bind(Decision(DecisionKind.START, job_id, nodes=("n0", "n0")), {"n0": 2})
    launch = rt.launches[-1]
    assert launch.kind == "run" and launch.nodes == ("n0", "n0")
    run = launch.spec.run
    assert (run.micro_batch, run.grad_accum, launch.spec.gpus, run.plan) == (8, 2, 2, None)
    config = [e for e in store.events(job_id) if e["event"] == "config"]
    assert (
        config and config[-1]["message"] == "runs 2 GPUs (ddp), micro-batch 8 x 2, fp32 (measured)"
    )
    rec = store.get(job_id)
    assert json.loads(rec.fields["applied"])["gpus"] == 2
    out = io.StringIO()
    Console(file=out, width=120).print(verdicts_table([(rec, SLAVerdict(None, "-", "-"))]))
    row = next(line for line in out.getvalue().splitlines() if job_id in line)
    cells = [c.strip() for c in row.split("│")[1:-1]]
    assert cells[:4] == [job_id, "t", "placed", "2"]  # job, team, state, GPUs
    shown = render_show(store, job_id)
    assert "2 GPUs (ddp), micro-batch 8 x 2, fp32 (measured)" in shown
    assert "GPUs 2 (ddp)" in shown  # the settings row: the config that runs


def test_a_replaced_replica_is_an_event_and_the_job_runs_on(
    store: JobStore, make_loop: Any
) -> None:
    """A service's replica failed and another took its GPU (``ServiceRun``): the job stays
    running on the same GPUs, and its events say what happened."""
    from orchestrator.runtime.base import EventKind, Outcome, RunEvent

    loop, _ = make_loop([("n0", 2)])
    job_id = store.submit(job("a", gpus=2)).id
    loop.round()
    loop.round()
    run = loop.runs[job_id]
    lost = Outcome(OutcomeKind.LOST, "worker lost; replaced (1 of 3)")
    loop.reap([RunEvent(job_id, EventKind.REPLACED, time.time(), run.launch.serial, lost, ("n0",))])
    rec = store.get(job_id)
    assert rec.state is S.RUNNING and len((rec.placement or {})["nodes"]) == 2
    assert job_id in loop.runs
    [note] = [e for e in store.events(job_id) if e["event"] == "replica-replaced"]
    assert note["message"] == "a replica lost: worker lost; replaced (1 of 3)"
