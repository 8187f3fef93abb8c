"""Decisions are values: a policy returns them, the scheduler applies them."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class DecisionKind(enum.Enum):
    """What the scheduler should do with a job.

    The scheduler applies a round's decisions in the order given: every ``PREEMPT`` and
    shrinking ``RESIZE`` a policy returns comes before the ``START`` or growing ``RESIZE`` that
    uses the GPUs it frees.
    """

    START = "start"  # place the queued job's gang on ``nodes`` and run it
    WAIT = "wait"  # leave it queued; ``reason`` says why (shown to the user)
    PREEMPT = "preempt"  # stop the running job, free its GPUs, requeue it (resumes from checkpoint)
    RESIZE = "resize"  # move the running job to exactly ``nodes`` (restart from checkpoint)


@dataclass(frozen=True)
class Decision:
    """One decision about one job.

    Attributes:
        kind: what to do.
        job_id: which job.
        nodes: for START and RESIZE, the node id of each GPU (one entry per gang member); for a
            RESIZE this is the job's whole new set (GPUs it keeps, gains, and not those it drops).
        strategy: for START and RESIZE, the Ray placement-group strategy of the placement policy.
        reason: a short human-readable explanation.
    """

    kind: DecisionKind
    job_id: str
    nodes: tuple[str, ...] = ()
    strategy: str = "PACK"
    reason: str = ""
