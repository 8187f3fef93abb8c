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
    """

    @abc.abstractmethod
    def decide(self, snapshot: Snapshot) -> list[Decision]:
        """Return this round's decisions, in the order the scheduler should apply them."""


SCHEDULING_POLICIES: Registry[SchedulingPolicy] = Registry("scheduling")
