"""The live snapshot fills every field a policy reads, for a job that has that fact.

The check walks the snapshot dataclasses' fields, so a field added to the policy snapshot later
fails here until the live loop fills it (and the simulator's twin test covers the other side).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from orchestrator.config import Settings
from orchestrator.control.loop import ControlLoop
from orchestrator.pool import NodeInfo
from orchestrator.runtime.local import LocalRuntime
from orchestrator.services import make_policy
from orchestrator.spec import JobSpec, parse_spec
from orchestrator.store import JobStore
from orchestrator.store.states import JobState
from policies import Decision, DecisionKind, QueuedJob, RunningJob


def _defaults(cls: type) -> dict[str, Any]:
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
    return out


def _report(store: JobStore, job_id: str) -> None:
    """What a job's worker reports while it trains (first step, checkpoint, progress)."""
    now = time.time()
    store.put_metrics(
        job_id,
        {
            "first_step_at": now,
            "checkpoint_at": now,
            "step": 5,
            "total_steps": 125,
            "global_batch": 8,
            "samples_per_s": 80.0,
        },
    )


def _specs() -> tuple[JobSpec, JobSpec, JobSpec]:
    """An elastic deadline job (with a memory need and GPU kinds), an interactive one with a
    start-wait target, and a scalable service: between them every fact a policy reads."""
    bulk = parse_spec(
        {
            "name": "deadline",
            "team": "t",
            "class": "bulk",
            "workload": "mlp",
            "sla": {"throughput": {"work_samples": 1000, "deadline_s": 3600}},
            "resources": {
                "gpus": {"min": 1, "max": 2},
                "gpu_memory_gb": 16,
                "gpu_kinds": ["A100"],
                "exclude_gpu_kinds": ["L4"],
            },
            "run": {"micro_batch": 8},
        }
    )
    inter = parse_spec(
        {
            "name": "notebook",
            "team": "t",
            "class": "interactive",
            "workload": "mlp",
            "sla": {"latency": {"max_ms": 50, "start_within_s": 5}},
            "run": {"steps": 10},
        }
    )
    service = parse_spec(
        {
            "name": "svc",
            "team": "t",
            "class": "interactive",
            "workload": {"name": "infer", "args": {"model": "mlp"}},
            "sla": {"latency": {"percentile": 99, "max_ms": 50}},
            "resources": {"gpus": {"min": 1, "max": 2}},
            "run": {"micro_batch": 8, "duration_s": 600},
            "serve": {"rate_rps": 100, "endpoint": False},
        }
    )
    return bulk, inter, service


def test_a_live_snapshot_leaves_no_policy_field_at_its_default(
    store: JobStore, tmp_path: Path
) -> None:
    bulk, inter, service = _specs()
    settings = Settings(
        redis_url="unused", namespace=store.namespace, data_dir=tmp_path, guard_hold_s=0.01
    )
    # a pool of two kinds: the kind facts (the job's own speed per kind, an interactive job's
    # slowest sufficient speed) are read in a pool of several kinds only
    rt = LocalRuntime(
        [
            NodeInfo("n0", "127.0.0.1", 4, virtual=True, kind="A100", speed=1.0),
            NodeInfo("n1", "127.0.0.1", 1, virtual=True, kind="L4", speed=0.4),
        ]
    )
    # no restart cost: the preempted job is not held after its preemption (issue 28), so the
    # next rounds place it again on the free pool
    loop = ControlLoop(settings, store, rt, make_policy("shared"), restart_cost_s=0.0)
    loop.lease.acquire(store.namespace)
    try:
        job_id = store.submit(bulk).id
        loop.round()
        loop.round()
        assert store.get(job_id).state is JobState.RUNNING
        _report(store, job_id)
        loop.bind(Decision(DecisionKind.PREEMPT, job_id, reason="contract"), {})
        loop.reap(rt.poll())
        # and, earlier in its life, one re-tune by the guard and one run lost to a dead node
        # (the history's other facts, which this scenario does not make)
        store.client.hset(store.keys.job(job_id), mapping={"retunes": 1, "losses": 1})
        inter_id = store.submit(inter).id
        # what runs on the A100 kind measured (as the reaper notes a run's end): the bulk job's
        # throughput, the interactive job's p95
        loop.facts.note_kind(job_id, "A100", {"samples_per_s": 80.0, "world_size": 1})
        loop.facts.note_kind(inter_id, "A100", {"p95_ms": 10.0})
        snap = loop.observe()
        queued = {q.job_id: q for q in snap.queue}
        # every defaulted field of a queued job: filled for the job that has the fact
        of_inter = {"wait_target_s", "min_speed"}
        facts = {f: queued[inter_id] for f in of_inter} | {
            f: queued[job_id] for f in _defaults(QueuedJob) if f not in of_inter
        }
        for name, default in _defaults(QueuedJob).items():
            assert getattr(facts[name], name) != default, f"queued {name} left at {default!r}"
        assert queued[inter_id].wait_target_s == 5
        assert queued[job_id].deadline == queued[job_id].submitted_at + 3600
        assert queued[job_id].remaining_work == (125 - 5) * 8 / 80.0

        svc_id = store.submit(service).id
        # a job still to be tuned: its gang runs the trials (a tuning gang)
        tuned = bulk.model_copy(
            update={"name": "to-tune", "tuning": bulk.tuning.model_copy(update={"enabled": True})}
        )
        tune_id = store.submit(parse_spec(tuned.model_dump(mode="json", by_alias=True))).id
        loop.round()  # placed again (the pool is free), then running
        loop.round()
        _report(store, job_id)
        # the service's tail near its ceiling: the guard asks for a second replica
        store.put_metrics(
            svc_id, {"first_step_at": time.time(), "window_steps": 50, "window_p99_ms": 45.0}
        )
        # its last seconds ran at 0.1 samples/s: its deadline will be missed at that rate, and
        # the SLA guard (after its hold) makes the elastic job urgent
        store.put_metrics(job_id, {"window_steps": 20, "window_samples_per_s": 0.1})
        now = time.time()
        loop.sla_guard.check(loop.runs, now + 1.0)  # (the guard checks every 0.5 s at most)
        loop.sla_guard.check(loop.runs, now + 2.0)  # out of bounds for longer than its hold
        snap = loop.observe()
        (running,) = [r for r in snap.running if r.job_id == job_id]
        (served,) = [r for r in snap.running if r.job_id == svc_id]
        (tuning,) = [r for r in snap.running if r.job_id == tune_id]
        for name, default in _defaults(RunningJob).items():
            if name == "min_speed":  # the interactive session's, checked queued above
                continue
            has = {"want_gpus": served, "tuning": tuning}.get(name, running)
            assert getattr(has, name) != default, f"running {name} left at {default!r}"
        assert running.attained_service > 0 and running.checkpoint_at >= running.started_at
    finally:
        loop.release(grace_s=5)


def test_a_run_for_a_set_time_has_its_time_left_as_remaining_work(
    store: JobStore, tmp_path: Path
) -> None:
    spec = parse_spec(
        {
            "name": "timed",
            "team": "t",
            "class": "bulk",
            "workload": "mlp",
            "sla": {"throughput": {"min_samples_per_s": 1}},
            "run": {"micro_batch": 8, "duration_s": 30},
        }
    )
    settings = Settings(redis_url="unused", namespace=store.namespace, data_dir=tmp_path)
    rt = LocalRuntime([("n0", 4)])
    loop = ControlLoop(settings, store, rt, make_policy("shared"))
    loop.lease.acquire(store.namespace)
    try:
        job_id = store.submit(spec).id
        loop.round()
        loop.round()
        now = time.time()
        store.put_metrics(
            job_id, {"first_step_at": now, "checkpoint_at": now, "step": 3, "time_left_s": 12.5}
        )
        (running,) = loop.observe().running
        assert running.remaining_work == 12.5
        loop.bind(Decision(DecisionKind.PREEMPT, job_id, reason="contract"), {})
        loop.reap(rt.poll())
        (queued,) = loop.observe().queue
        # its run time so far is in its checkpoint, so it resumes for what is left, not for
        # its whole duration_s again (issue 15, item 5b: the clock used to start again)
        assert queued.remaining_work == 12.5
    finally:
        loop.release(grace_s=5)


def test_the_loop_writes_the_plans_verdict_as_an_admission_event(
    store: JobStore, tmp_path: Path
) -> None:
    # issue 26: a deadline job whose remaining work is known (after a run) is judged on the
    # plan of the round's snapshot, as the simulator's desk judges it; the verdict is an event
    spec = parse_spec(
        {
            "name": "due",
            "team": "t",
            "class": "bulk",
            "workload": "mlp",
            "sla": {"throughput": {"work_samples": 8000, "deadline_s": 3600}},
            "run": {"micro_batch": 8},
        }
    )
    settings = Settings(redis_url="unused", namespace=store.namespace, data_dir=tmp_path)
    rt = LocalRuntime([("n0", 4)])
    loop = ControlLoop(settings, store, rt, make_policy("shared"))
    loop.lease.acquire(store.namespace)
    try:
        job_id = store.submit(spec).id
        loop.round()
        loop.round()
        assert not [e for e in store.events(job_id) if e["event"] == "admission"]  # work unknown
        now = time.time()
        store.put_metrics(
            job_id, {"first_step_at": now, "checkpoint_at": now, "step": 3, "time_left_s": 100.0}
        )
        loop.bind(Decision(DecisionKind.PREEMPT, job_id, reason="contract"), {})
        loop.reap(rt.poll())
        snapshot = loop.observe()
        loop.admit(snapshot)
        (event,) = [e for e in store.events(job_id) if e["event"] == "admission"]
        assert event["message"].startswith("admitted: the plan runs it on 1 GPUs")
        assert loop.admission.verdicts[job_id].admitted
        loop.admit(snapshot)  # once: the same verdict is not written again
        assert len([e for e in store.events(job_id) if e["event"] == "admission"]) == 1
    finally:
        loop.release(grace_s=5)
