"""Preemption policies, selected by name through ``PREEMPTIONS``."""

from policies.preemption.base import (
    PREEMPTIONS,
    OrderedVictimIndex,
    Preemption,
    VictimIndex,
    lost_work,
    pick_in_order,
)
from policies.preemption.cost_aware import CostAwarePreemption
from policies.preemption.newest import NewestPreemption

__all__ = [
    "PREEMPTIONS",
    "CostAwarePreemption",
    "NewestPreemption",
    "OrderedVictimIndex",
    "Preemption",
    "VictimIndex",
    "lost_work",
    "pick_in_order",
]
