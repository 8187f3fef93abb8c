"""The job state machine: states and the legal transitions between them.

Pure data, no Redis: the table here is the only copy. The store's transition script receives
the allowed source states from :func:`sources` as arguments, so Lua never holds its own table.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ACTIVE", "HOLDING", "TERMINAL", "TRANSITIONS", "JobState", "is_legal", "sources"]


class JobState(StrEnum):
    """Where a job is in its life. The string value is what Redis stores."""

    SUBMITTED = "submitted"
    QUEUED = "queued"
    PLACED = "placed"
    TUNING = "tuning"
    RUNNING = "running"
    CANCELLING = "cancelling"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"


_S = JobState

TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    _S.SUBMITTED: frozenset({_S.QUEUED, _S.CANCELLED, _S.FAILED}),
    _S.QUEUED: frozenset({_S.PLACED, _S.CANCELLED, _S.FAILED}),
    # Back to queued: the placement failed or the scheduler released it before it started.
    # Finished: a placed job can complete before its "running" report is applied.
    # Tuning: the gang it was placed on profiles configs for it before it runs.
    _S.PLACED: frozenset({_S.RUNNING, _S.TUNING, _S.QUEUED, _S.CANCELLING, _S.FAILED, _S.FINISHED}),
    # Back to queued with its tuned settings (or lost, preempted); failed: SLA-infeasible.
    _S.TUNING: frozenset({_S.QUEUED, _S.FAILED, _S.CANCELLING}),
    # Back to queued: the worker was lost (orchestrator restart) or the job was preempted.
    # Back to placed: resized, it restarts at once on its new GPUs.
    _S.RUNNING: frozenset({_S.FINISHED, _S.FAILED, _S.CANCELLING, _S.QUEUED, _S.PLACED}),
    # A job asked to stop may still finish or fail before it notices.
    _S.CANCELLING: frozenset({_S.CANCELLED, _S.FINISHED, _S.FAILED}),
    _S.FINISHED: frozenset(),
    _S.FAILED: frozenset(),
    _S.CANCELLED: frozenset(),
}

TERMINAL: frozenset[JobState] = frozenset(s for s, exits in TRANSITIONS.items() if not exits)
"""States a job never leaves."""

ACTIVE: frozenset[JobState] = frozenset(JobState) - TERMINAL
"""States of a job that is not done yet (waiting, placed, running or stopping)."""

HOLDING = (JobState.PLACED, JobState.TUNING, JobState.RUNNING, JobState.CANCELLING)
"""States of a job that holds GPUs (a run of it placed, tuning, running or stopping)."""


def is_legal(current: JobState | str, target: JobState | str) -> bool:
    """Whether a job in ``current`` may move to ``target`` (unknown state names are illegal)."""
    try:
        return JobState(target) in TRANSITIONS[JobState(current)]
    except ValueError:
        return False


def sources(target: JobState | str) -> frozenset[JobState]:
    """The states from which ``target`` may be entered."""
    t = JobState(target)
    return frozenset(s for s, exits in TRANSITIONS.items() if t in exits)
