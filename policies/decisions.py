"""Decisions are values: a policy returns them, the scheduler applies them."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class DecisionKind(enum.Enum):
    """What the scheduler should do with a job."""

    START = "start"  # place the job's gang on ``nodes`` and run it
    WAIT = "wait"  # leave it queued; ``reason`` says why (shown to the user)


@dataclass(frozen=True)
class Decision:
    """One decision about one job.

    Attributes:
        kind: what to do.
        job_id: which job.
        nodes: for START, the node id of each GPU (one entry per gang member).
        strategy: for START, the Ray placement-group strategy matching the placement policy.
        reason: a short human-readable explanation.
    """

    kind: DecisionKind
    job_id: str
    nodes: tuple[str, ...] = ()
    strategy: str = "PACK"
    reason: str = ""
