"""Decisions are values: a policy returns them, the scheduler applies them."""

from __future__ import annotations

import enum
from typing import NamedTuple


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


class Decision(NamedTuple):
    """One decision about one job: a value (immutable, compared by its fields).

    A named tuple rather than a frozen dataclass: a round at 1,000 queued jobs makes about
    1,800 of them, and a frozen dataclass's ``__init__`` (one ``object.__setattr__`` per field,
    ~480 ns) cost about 8% of the decision against ~210 ns for a named tuple.

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
