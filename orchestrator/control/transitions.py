"""What the end of a run means for its job: pure decisions, returned as values.

The control loop knows why it stopped a run (a cancel, a preemption, a resize, its own
shutdown) and the runtime says how the run ended; :func:`run_ended` turns the two into the
job's next state, message and fields. :func:`tuning_ended` does the same for the tuner's answer.
No Redis, no Ray: every case is tested as a table, and every target is legal from the state the
job is in (so an ended run always leaves its job somewhere legal, never stranded).
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any

from orchestrator.runtime.base import Outcome, OutcomeKind, RunKind
from orchestrator.store.states import JobState

__all__ = ["MAX_ATTEMPTS", "StopReason", "Transition", "run_ended", "tuning_ended"]

MAX_ATTEMPTS = 3
"""Runs a job may lose (its workers or node died) before it fails; a workload error never
retries, and preemptions and resizes do not count."""


class StopReason(enum.Enum):
    """Why the control loop asked a run to stop."""

    CANCEL = "cancel"  # a user cancelled the job (the store says cancelling)
    PREEMPT = "preempt"  # its GPUs go to another job; it is requeued
    RESIZE = "resize"  # it restarts on another set of GPUs
    SHUTDOWN = "shutdown"  # the scheduler is stopping; it is requeued
    RETUNE = "retune"  # the SLA guard re-tunes it from its measured data; it is requeued


@dataclass(frozen=True)
class Transition:
    """A job's next state, as the loop writes it.

    Attributes:
        target: the new state.
        message: why (stored on the job and in its event).
        fields: extra fields to set with the transition.
        relaunch: the job goes on at once on the run's resize target (``target`` is placed).
        lost: the run counts as one lost (its workers or node died after starting): the job's
            history counts it (``policies.history.RunEnd.lost``).
    """

    target: JobState
    message: str
    fields: dict[str, Any] = field(default_factory=dict)
    relaunch: bool = False
    lost: bool = False


def run_ended(
    state: JobState,
    kind: RunKind,
    outcome: Outcome,
    stop: StopReason | None,
    *,
    started: bool,
    losses: int,
    stop_note: str = "",
) -> Transition:
    """The next state of a job whose run (a job run or a tuning run) has ended.

    Args:
        state: the job's state now (placed, tuning, running or cancelling).
        kind: what the run was.
        outcome: how it ended.
        stop: why the loop had asked it to stop, if it had.
        started: its workers had started (only a started run can lose work).
        losses: runs of the job lost before this one.
        stop_note: the reason that went with the stop (the preemption's cause...).
    """
    k = outcome.kind
    lost = k is OutcomeKind.LOST or (k is OutcomeKind.STOPPED and stop is None)
    counted = losses + (1 if lost and started else 0)
    t = _next(state, kind, outcome, stop, counted, lost, stop_note)
    return dataclasses.replace(t, lost=True) if counted != losses else t


def _next(
    state: JobState,
    kind: RunKind,
    outcome: Outcome,
    stop: StopReason | None,
    counted: int,
    lost: bool,
    stop_note: str,
) -> Transition:
    """:func:`run_ended`'s table (``counted``: the job's lost runs, this one included)."""
    k = outcome.kind
    base: dict[str, Any] = {"placement": ""}
    if k is OutcomeKind.FINISHED and kind == "run":  # done, even if a cancel came in meanwhile
        return Transition(JobState.FINISHED, outcome.message, base)
    if state is JobState.CANCELLING:
        return Transition(JobState.CANCELLED, "cancelled", base)
    if k is OutcomeKind.FINISHED:  # a tuning run with the tuner's answer
        return tuning_ended(outcome.result)
    if k is OutcomeKind.FAILED:
        return Transition(JobState.FAILED, outcome.message, base)
    if k is OutcomeKind.STOPPED and stop is StopReason.RESIZE and state is JobState.RUNNING:
        return Transition(JobState.PLACED, stop_note, base, relaunch=True)
    if lost and counted >= MAX_ATTEMPTS:
        msg = f"gave up after {counted} attempts: {outcome.message}"
        return Transition(JobState.FAILED, msg, base)
    if k is OutcomeKind.STOPPED and stop is StopReason.PREEMPT:
        return Transition(JobState.QUEUED, f"requeued: preempted: {stop_note}", base)
    if k is OutcomeKind.STOPPED and stop is StopReason.RETUNE:
        # its tuned settings are dropped: it is tuned again (from the measured data) when the
        # policy next places it, then resumes from its checkpoint with what that chose
        return Transition(
            JobState.QUEUED, f"requeued: re-tuning: {stop_note}", {**base, "tuned": ""}
        )
    if k is OutcomeKind.STOPPED and stop is StopReason.RESIZE:
        # stopped for a resize before it had started: the policy places it afresh
        return Transition(JobState.QUEUED, "requeued: resized before it started", base)
    why = outcome.message or "stopped"
    if k is OutcomeKind.STOPPED and stop is StopReason.SHUTDOWN:
        why = "the scheduler stopped; resumes"
    return Transition(JobState.QUEUED, f"requeued: {why}", base)


_CACHE_WORDS = {
    "hit": "cache hit",
    "warm": "warm-started from the cache",
    "miss": "cache miss",
    "off": "cache off",
}
"""The tuning cache's status (``tuner.service.TuneReport.cache``) as an event says it: a bare
"miss" beside a job's tuning reads as an SLA missed."""


def tuning_ended(answer: dict[str, Any]) -> Transition:
    """The next state of a job whose tuning finished: queued with its tuned settings, or
    failed as SLA-infeasible (``answer`` is the tuner's, see ``tuner.remote.tune_job``)."""
    cache, trials = answer.get("cache", "?"), answer.get("trials", 0)
    if answer.get("retune") and answer.get("previous"):  # the SLA guard's, of a running job
        return _retuned(answer, trials)
    if answer.get("run") and answer.get("config"):
        from orchestrator.tuner.space import Config

        config = Config.from_dict(answer["config"])
        cached = _CACHE_WORDS.get(str(cache), f"cache {cache}")
        msg = f"tuned ({cached}, {trials} trials): {config.describe()}"
        return Transition(JobState.QUEUED, msg, {"placement": "", "tuned": answer["config"]})
    msg = (
        f"sla-infeasible: {answer.get('reason') or 'no config meets the SLA'} "
        f"(closest: {answer.get('closest')}; {trials} trials); set "
        "tuning.best_effort: true to run the closest config anyway"
    )
    return Transition(JobState.FAILED, msg, {"placement": ""})


def _retuned(answer: dict[str, Any], trials: object) -> Transition:
    """A re-tune's answer: the new settings when they are predicted to meet the SLA, else
    the ones it ran with (a job that was running is never failed by a re-tune)."""
    from orchestrator.tuner.space import Config

    previous: dict[str, Any] = answer["previous"]  # the caller checked it is there
    if answer.get("feasible") and answer.get("config"):
        config = Config.from_dict(answer["config"])
        if answer["config"] == previous:
            msg = f"re-tuned ({trials} trials): its settings stay the best: {config.describe()}"
        else:
            msg = f"re-tuned from the measured data ({trials} trials): {config.describe()}"
        return Transition(JobState.QUEUED, msg, {"placement": "", "tuned": answer["config"]})
    msg = (
        f"re-tuned ({trials} trials): no config is predicted to meet the SLA "
        f"({answer.get('reason') or 'none'}); resumes with its settings: "
        f"{Config.from_dict(previous).describe()}"
    )
    return Transition(JobState.QUEUED, msg, {"placement": "", "tuned": previous})
