"""Preemption policies, selected by name through ``PREEMPTIONS``."""

from policies.preemption.base import PREEMPTIONS, Preemption, lost_work
from policies.preemption.cost_aware import CostAwarePreemption
from policies.preemption.newest import NewestPreemption

__all__ = ["PREEMPTIONS", "CostAwarePreemption", "NewestPreemption", "Preemption", "lost_work"]
