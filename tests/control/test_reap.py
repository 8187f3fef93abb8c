"""What an ended run writes with its job's transition (``ended_fields``): pure, no Redis or Ray.

The live loop's tests (``test_loop.py``) see these fields through the store; here each rule is
checked on its own: attained service, restarts, the work left of a requeued job, a finished
job's result, a resized job's new placement.
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.control.ledger import Run
from orchestrator.control.reap import ended_fields, metrics_of
from orchestrator.control.transitions import StopReason, run_ended
from orchestrator.runtime.base import Launch, Outcome, OutcomeKind
from orchestrator.storage import StorageLocation
from orchestrator.store.history import STORED, read_history
from orchestrator.store.records import JobRecord
from orchestrator.store.states import JobState
from tests.control.test_loop import job

NODES = ("n0", "n0")


def record(state: JobState, **fields: str) -> JobRecord:
    spec = job("a", gpus=2)
    return JobRecord(
        id="a-1",
        name="a",
        team="t",
        job_class="bulk",
        state=state,
        spec_data=json.loads(spec.model_dump_json(by_alias=True)),
        seq=1,
        gpus=2,
        submitted_at=0.0,
        updated_at=0.0,
        fields=dict(fields),
    )


def run(stop: StopReason | None = None, resize_to: tuple[str, ...] | None = None) -> Run:
    launch = Launch(
        "a-1", "run", job("a", gpus=2), NODES, "PACK", 1, StorageLocation("/tmp/c"), False
    )
    return Run(launch, launched_at=100.0, started=True, stop=stop, resize_to=resize_to)


def ended(
    rec: JobRecord, r: Run, kind: OutcomeKind, result: dict[str, Any], progress: dict[str, Any]
) -> dict[str, Any]:
    outcome = Outcome(kind, "why", result)
    t = run_ended(rec.state, "run", outcome, r.stop, started=r.started, losses=0)
    return ended_fields(rec, r, t, outcome, 160.0, progress)


def test_a_preempted_run_adds_its_service_and_leaves_its_work_left() -> None:
    rec = record(JobState.RUNNING, attained_gpu_s="30", restarts="1", remaining_s="500")
    fields = ended(rec, run(StopReason.PREEMPT), OutcomeKind.STOPPED, {}, {"time_left_s": 42})
    assert fields["attained_gpu_s"] == 30.0 + 60.0 * 2  # 60 s on 2 GPUs
    assert fields["most_gpus"] == 2
    assert fields["restarts"] == 2
    assert fields["remaining_s"] == 42.0  # measured: replaces the submission's estimate
    assert fields["preempted_at"] == 160.0
    assert "finished_at" not in fields


def test_a_requeued_run_with_nothing_measured_keeps_its_estimate() -> None:
    rec = record(JobState.RUNNING, remaining_s="500", preempted_at="90")
    fields = ended(rec, run(), OutcomeKind.LOST, {}, {})
    assert "remaining_s" not in fields  # the estimate stays as it is stored
    assert fields["preempted_at"] == ""  # requeued, but not by a preemption
    assert fields["losses"] == 1  # a lost run counts toward the job's attempts
    after = read_history({**rec.fields, **{k: str(v) for k, v in fields.items()}})
    assert (after.remaining_work, after.preempted_at, after.losses) == (500.0, None, 1)


def test_only_what_changed_is_written() -> None:
    """The history is written where the run changed it: a finished run leaves restarts and
    the work left as stored, and a job never preempted is not written a preemption time."""
    rec = record(JobState.RUNNING, restarts="2", remaining_s="10")
    fields = ended(rec, run(), OutcomeKind.FINISHED, {}, {})
    assert set(fields) & set(STORED.values()) == {"attained_gpu_s", "most_gpus"}


def test_a_finished_run_writes_its_result_and_when() -> None:
    result = {"samples_per_s": 12.5, "world_size": 2}
    fields = ended(record(JobState.RUNNING), run(), OutcomeKind.FINISHED, result, {})
    assert fields["finished_at"] == 160.0
    assert fields["result"] == result
    assert "restarts" not in fields and "remaining_s" not in fields


def test_a_resized_run_goes_on_on_its_new_gpus() -> None:
    r = run(StopReason.RESIZE, resize_to=("n0", "n1", "n1"))
    fields = ended(record(JobState.RUNNING), r, OutcomeKind.STOPPED, {}, {})
    assert fields["placement"] == {"nodes": ["n0", "n1", "n1"], "strategy": "PACK"}
    assert fields["restarts"] == 1
    assert "remaining_s" not in fields  # placed again, not requeued


def test_only_scalar_metrics_of_a_result_are_kept() -> None:
    assert metrics_of({"p95_ms": 3.0, "status": "done", "curve": [1, 2]}) == {
        "p95_ms": 3.0,
        "status": "done",
    }
