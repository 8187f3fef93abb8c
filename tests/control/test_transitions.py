"""What the end of a run means for its job: the pure table, and that it never strands a job."""

from __future__ import annotations

import itertools

import pytest

from orchestrator.control.transitions import MAX_ATTEMPTS, StopReason, run_ended, tuning_ended
from orchestrator.runtime.base import Outcome, OutcomeKind
from orchestrator.store.states import JobState, is_legal

S, K, R = JobState, OutcomeKind, StopReason


@pytest.mark.parametrize(
    ("state", "kind", "stop", "losses", "target"),
    [
        (S.RUNNING, K.FINISHED, None, 0, S.FINISHED),
        (S.CANCELLING, K.FINISHED, R.CANCEL, 0, S.FINISHED),  # the work was done
        (S.CANCELLING, K.STOPPED, R.CANCEL, 0, S.CANCELLED),
        (S.CANCELLING, K.LOST, R.CANCEL, 0, S.CANCELLED),
        (S.RUNNING, K.FAILED, None, 0, S.FAILED),  # a workload error: no retry
        (S.RUNNING, K.STOPPED, R.SHUTDOWN, 0, S.QUEUED),  # the scheduler is stopping
        (S.RUNNING, K.STOPPED, R.PREEMPT, MAX_ATTEMPTS - 1, S.QUEUED),  # not a loss
        (S.RUNNING, K.STOPPED, R.RESIZE, 0, S.PLACED),  # goes on on its new GPUs
        (S.PLACED, K.STOPPED, R.RESIZE, 0, S.QUEUED),  # resized before it started: placed anew
        (S.RUNNING, K.STOPPED, None, 0, S.QUEUED),  # stopped on its own: a lost run
        (S.RUNNING, K.LOST, None, 0, S.QUEUED),
        (S.RUNNING, K.LOST, None, MAX_ATTEMPTS - 2, S.QUEUED),
        (S.RUNNING, K.LOST, None, MAX_ATTEMPTS - 1, S.FAILED),
    ],
)
def test_a_job_run_ends(
    state: JobState, kind: OutcomeKind, stop: StopReason | None, losses: int, target: JobState
) -> None:
    t = run_ended(state, "run", Outcome(kind, "why"), stop, started=True, losses=losses)
    assert t.target is target
    assert t.relaunch is (target is S.PLACED)
    if target is S.FAILED and kind is K.LOST:
        assert t.message == f"gave up after {MAX_ATTEMPTS} attempts: why"


def test_only_a_run_lost_after_it_started_counts_as_a_loss() -> None:
    lost = Outcome(K.LOST, "Ray could not place the gang")
    unplaced = run_ended(S.PLACED, "run", lost, None, started=False, losses=MAX_ATTEMPTS - 1)
    assert unplaced.target is S.QUEUED and not unplaced.lost
    started = run_ended(S.RUNNING, "run", lost, None, started=True, losses=1)
    assert started.lost and started.target is S.QUEUED  # the second of MAX_ATTEMPTS
    preempted = run_ended(S.RUNNING, "run", Outcome(K.STOPPED), R.PREEMPT, started=True, losses=1)
    assert not preempted.lost and preempted.message.startswith("requeued: preempted")


def test_every_ended_run_leaves_its_job_in_a_legal_state() -> None:
    """Whatever the state, the kind of run, the outcome and the stop reason, the target can be
    entered from the state the job is in: an ended run never strands its job."""
    answers = [{"run": True, "config": {"micro_batch": 8}}, {"run": False, "reason": "slow"}]
    combos = itertools.product(
        [
            *((S.PLACED, "run"), (S.RUNNING, "run"), (S.CANCELLING, "run")),
            *((S.PLACED, "tune"), (S.TUNING, "tune"), (S.CANCELLING, "tune")),
        ],
        list(OutcomeKind),
        [None, *StopReason],
        [0, MAX_ATTEMPTS - 1],
        [True, False],
        answers,
    )
    for (state, run), kind, stop, losses, started, answer in combos:
        if state is S.CANCELLING and stop is None:
            stop = R.CANCEL
        outcome = Outcome(kind, "why", answer if run == "tune" else {"loss": 1.0})
        t = run_ended(state, run, outcome, stop, started=started, losses=losses)  # type: ignore[arg-type]
        assert is_legal(state, t.target), (state, run, kind, stop, t)


def test_tuning_ends_queued_with_its_settings_or_failed_as_infeasible() -> None:
    good = tuning_ended({"run": True, "config": {"micro_batch": 16}, "cache": "miss", "trials": 7})
    assert good.target is S.QUEUED and good.fields["tuned"] == {"micro_batch": 16}
    assert good.message.startswith("tuned (cache miss, 7 trials): ")
    bad = tuning_ended({"run": False, "reason": "p95 38 ms > 25 ms", "closest": "mb 1"})
    assert bad.target is S.FAILED and bad.message.startswith("sla-infeasible: p95 38 ms > 25 ms")
    assert "best_effort" in bad.message
