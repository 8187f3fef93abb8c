"""Scheduling policy: the whole round's decisions from one snapshot."""

from __future__ import annotations

import abc

from policies.decisions import Decision
from policies.registry import Registry
from policies.snapshot import Snapshot


class SchedulingPolicy(abc.ABC):
    """Turns a snapshot into decisions.

    Contract: pure and deterministic for the same snapshot (including its seed); it never acts,
    keeps no state between rounds, and never starts jobs on more GPUs than a node has free.

    Attributes:
        binds_admission: it reads ``Snapshot.declined`` (the admission desk's verdicts), so
            the world that runs it must fill it (the simulator runs the desk only then, or
            with ``SimConfig.plan_admission``; the live loop always does).
    """

    binds_admission: bool = False

    @abc.abstractmethod
    def decide(self, snapshot: Snapshot) -> list[Decision]:
        """Return this round's decisions, in the order the scheduler should apply them."""


SCHEDULING_POLICIES: Registry[SchedulingPolicy] = Registry("scheduling")
