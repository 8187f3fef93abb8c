"""A job's history: what its ended runs left behind, as one frozen record and one rule.

Every fact that a run's end changes and a policy (or the SLA guard, or an account) reads lives
in :class:`JobHistory`: GPU-seconds held, restarts, the most GPUs it ran on, when it was last
preempted, the work left, its re-tunes and lost runs. :func:`advance` is the one rule that
advances it, called by the live loop (``orchestrator.control.reap``) and by the simulator
(``orchestrator.sim.apply``) alike, so the two agree by construction. The store reads and
writes the record in one module (``orchestrator.store.history``), and the snapshot's job types
(:class:`~policies.snapshot.QueuedJob`, :class:`~policies.snapshot.RunningJob`) carry its
fields under the same names, so a new fact touches this record, its rule and the policy that
reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["HISTORY_FIELDS", "NEVER_RUN", "JobHistory", "RunEnd", "advance"]


@dataclass(frozen=True, kw_only=True)
class JobHistory:
    """What a job's ended runs left (plain values; the defaults: a job never run).

    Attributes:
        attained_service: GPU-seconds held by its ended runs (a running job's current run is
            counted by the policy from its ``started_at``).
        remaining_work: estimated seconds of work left on its requested GPUs (``None``:
            unknown): the submission's estimate until a run measures it.
        preempted_at: when its last run was stopped by a preemption, on the round clock
            (``None``: its last requeue, if any, was not one).
        restarts: its runs that ended with the job going on (requeued or resized): Pollux's
            ``num_restarts``.
        most_gpus: the most GPUs any of its ended training runs held (0: none ended).
        retunes: the SLA guard's re-tunes of it (bounded by ``guard_max_retunes``).
        losses: its runs lost to dead workers or nodes (a job fails at ``MAX_ATTEMPTS``).
    """

    attained_service: float = 0.0
    remaining_work: float | None = None
    preempted_at: float | None = None
    restarts: int = 0
    most_gpus: int = 0
    retunes: int = 0
    losses: int = 0


NEVER_RUN = JobHistory()
"""The history of a job with no ended run (a frozen value: safe as a shared default)."""

HISTORY_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(JobHistory))
"""The record's field names, in order (the snapshot's job types carry the same)."""


@dataclass(frozen=True, kw_only=True)
class RunEnd:
    """How one run of a job ended: what advances its history.

    Attributes:
        at: when it ended (the round clock's).
        gpus: GPUs it held.
        held_s: seconds it held them (from its launch; never negative).
        gpu_s: GPU-seconds it held, when its GPUs changed while it ran (a service resized in
            place: ``gpus`` is then the most it held at once); ``None``: ``held_s`` x ``gpus``.
        trained: a training run whose workers started (not a tuning run, not one that never
            came up): only such a run counts toward ``most_gpus`` and ``restarts``.
        goes_on: the job goes on after it (requeued, or relaunched on other GPUs).
        requeued: the job waits in the queue again (a resize relaunches without waiting).
        preempted: it was stopped by a preemption.
        remaining_work: the work left as the run last measured it (``None``: not measured,
            the estimate stays); read for a requeued job only.
        retune: it was stopped for a re-tune that counts against the guard's bound.
        lost: it was lost (its workers or node died), which counts toward the job's attempts.
    """

    at: float
    gpus: int
    held_s: float
    trained: bool
    goes_on: bool = False
    requeued: bool = False
    preempted: bool = False
    remaining_work: float | None = None
    retune: bool = False
    lost: bool = False
    gpu_s: float | None = None


def advance(history: JobHistory, end: RunEnd) -> JobHistory:
    """The job's history after ``end`` (pure: the same in the live loop and the simulator)."""
    h = history
    most, restarts = h.most_gpus, h.restarts
    if end.trained:
        most = max(most, end.gpus)
        restarts += 1 if end.goes_on else 0
    remaining, preempted_at, retunes = h.remaining_work, h.preempted_at, h.retunes
    if end.requeued:
        if end.remaining_work is not None:
            remaining = end.remaining_work
        preempted_at = end.at if end.preempted else None
        retunes += 1 if end.retune else 0
    return JobHistory(
        attained_service=h.attained_service
        + (max(0.0, end.held_s) * end.gpus if end.gpu_s is None else max(0.0, end.gpu_s)),
        remaining_work=remaining,
        preempted_at=preempted_at,
        restarts=restarts,
        most_gpus=most,
        retunes=retunes,
        losses=h.losses + (1 if end.lost else 0),
    )
