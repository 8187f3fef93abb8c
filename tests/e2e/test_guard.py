"""The SLA guard on live jobs: a workload slowed on purpose after some steps trips its checks,
and the guard says so and acts (urgency for an elastic job, a re-tune from the measured data).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.spec import JobSpec, parse_spec
from orchestrator.store.states import JobState
from tests.e2e.conftest import Orch, start_orch

DONE = {JobState.FINISHED, JobState.FAILED, JobState.CANCELLED}
SLOWED = "tests.e2e.slowed_workload:build"


@pytest.fixture
def guarded(ray_cluster: Any, redis_url: str, namespace: str, tmp_path: Path) -> Iterator[Orch]:
    """A ``shared`` scheduler whose guard trips after 1 s out of bounds (10 s by default)."""
    o = start_orch(
        ray_cluster.address, redis_url, namespace, tmp_path, policy="shared", guard_hold_s=1.0
    )
    yield o
    o.running.shutdown()
    o.store.delete_namespace()


def _job(
    name: str,
    cls: str,
    sla: dict[str, Any],
    gpus: Any = 1,
    args: dict[str, Any] | None = None,
    steps: int | None = 240,
    **extra: Any,
) -> JobSpec:
    return parse_spec(
        {
            "name": name,
            "team": "e2e",
            "class": cls,
            # 40 micro-batches at full speed, then each costs 40 ms more
            "workload": {
                "entry": SLOWED,
                "args": {"slow_after": 40, "slow_ms": 40, **(args or {})},
            },
            "sla": sla,
            "resources": {"gpus": gpus},
            "run": {"micro_batch": 8, "warmup_steps": 2, **({"steps": steps} if steps else {})},
            **extra,
        }
    )


def _tuned(name: str, *, floor: float, trials: int, **extra: Any) -> JobSpec:
    """A tuned bulk job with a samples/s ``floor``, tuned on fp32 micro-batches 4-16."""
    tuning = {
        "enabled": True,
        "budget": {"trials": trials},
        "bounds": {
            "micro_batch": {"min": 4, "max": 16},
            "grad_accum": {"min": 1, "max": 1},
            "precision": ["fp32"],
        },
    }
    return _job(name, "bulk", {"throughput": {"min_samples_per_s": floor}}, tuning=tuning, **extra)


def _guard_events(orch: Orch, job_id: str) -> list[str]:
    return [
        e["message"]
        for e in orch.store.events(job_id)
        if e["message"].startswith(("sla-", "guard:"))
    ]


def test_each_check_trips_on_a_live_job_and_is_told(guarded: Orch) -> None:
    floor = guarded.store.submit(
        _job("floor", "bulk", {"throughput": {"min_samples_per_s": 1000}}, {"min": 1, "max": 2})
    ).id
    due = guarded.store.submit(
        _job(
            "due",
            "bulk",
            {"throughput": {"work_samples": 320 * 8, "deadline_s": 35}},
            args={"slow_ms": 120},  # 38 s of slowed work: it misses, seen well before
            steps=None,
        )
    ).id
    chat = guarded.store.submit(
        _job("chat", "interactive", {"latency": {"percentile": 95, "max_ms": 25}})
    ).id
    for job_id in (floor, due, chat):
        rec = guarded.wait(job_id, DONE, timeout_s=240)
        assert rec.state is JobState.FINISHED, rec.message
    floor_events = _guard_events(guarded, floor)
    assert any(m.startswith("sla-violated: throughput") for m in floor_events), floor_events
    # an elastic job short of its floor is urgent for the policy
    assert any(m.startswith("guard: urgent") for m in floor_events), floor_events
    due_events = _guard_events(guarded, due)
    assert any(m.startswith("sla-at-risk: deadline") for m in due_events), due_events
    chat_events = _guard_events(guarded, chat)
    assert any(m.startswith("sla-violated: latency p95") for m in chat_events), chat_events
    # rigid jobs are told, never made urgent; untuned jobs are never re-tuned
    assert not any(m.startswith("guard: urgent") for m in due_events + chat_events)
    assert not any("re-tuning" in m for m in floor_events + due_events + chat_events)
    # what the guard saw is counted for /metrics
    guarded.running.scheduler.telemetry.flush()
    counts = guarded.store.telemetry.read()
    assert counts.counter("guard_violated").get("throughput", 0) >= 1
    assert counts.counter("guard_violated").get("latency", 0) >= 1
    assert counts.counter("guard_at_risk").get("deadline", 0) >= 1


@pytest.fixture
def shared_folder() -> Iterator[Path]:
    """A folder a sandboxed job (its own uid) may write, like /tmp (tmp_path is 0700 root)."""
    folder = Path(tempfile.mkdtemp(prefix="orch-guard-"))
    folder.chmod(0o1777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_job_that_contradicts_its_profile_is_retuned_once_and_finishes(
    guarded: Orch, shared_folder: Path
) -> None:
    # written by the job's own (sandboxed) code; once it exists, the re-tune's trials are slowed
    flag = shared_folder / "slowed"
    # its floor is met at full speed (thousands of samples/s) and missed once slowed (at most
    # 16 samples per 40 ms): the SLA at risk and the profile contradicted, so it is re-tuned
    spec = _tuned("drifts", floor=800, trials=3, args={"flag": str(flag)})
    job_id = guarded.store.submit(spec).id
    rec = guarded.wait(job_id, DONE, timeout_s=300)
    assert rec.state is JobState.FINISHED, rec.message
    assert flag.exists()
    messages = [e["message"] for e in guarded.store.events(job_id)]
    assert any(m.startswith("profile-drift:") for m in messages), messages
    assert any(m.startswith("guard: profile corrected") for m in messages), messages
    assert any(m.startswith("sla-violated: throughput") for m in messages), messages
    retuning = [i for i, m in enumerate(messages) if m.startswith("guard: re-tuning")]
    assert len(retuning) == 1, messages  # bounded: one re-tune in its life
    after = messages[retuning[0] :]
    assert any(m.startswith("requeued: re-tuning") for m in after), after
    assert any(m.startswith("re-tuned") for m in after), after
    assert int(rec.fields["retunes"]) == 1
    measured = json.loads(rec.fields["retune"])
    assert measured["measured"]["samples_per_s"] > 0
    assert json.loads(rec.fields["tuned"])  # it ran on settings the re-tune kept or chose
    # it resumed from its checkpoint: all its steps, across the two runs
    assert rec.result is not None and rec.result["steps_done"] == 240
    assert rec.result["resumed_from_step"]


def test_a_tuned_job_meeting_its_sla_is_never_stopped_for_its_profile(guarded: Orch) -> None:
    """Slowed far below what its profile expects, but far above its floor: the profile is
    corrected, the job is not stopped."""
    spec = _tuned("keeps", floor=1, trials=2)
    job_id = guarded.store.submit(spec).id
    rec = guarded.wait(job_id, DONE, timeout_s=300)
    assert rec.state is JobState.FINISHED, rec.message
    messages = [e["message"] for e in guarded.store.events(job_id)]
    assert any(m.startswith("profile-drift:") for m in messages), messages
    assert any(m.startswith("guard: profile corrected") for m in messages), messages
    assert not any("re-tuning" in m for m in messages), messages
    assert int(rec.fields.get("retunes") or 0) == 0
    chosen = (guarded.store.profiles.load(job_id) or {})["chosen"]
    tuned_rate = chosen.get("measured_samples_per_s") or chosen["samples_per_s"]
    # what the profile expects now is what the run measured, well under what the tuner did
    assert 0 < chosen["live"]["samples_per_s"] < 0.75 * tuned_rate
    assert rec.result is not None and rec.result["steps_done"] == 240
