"""Scheduling policies, selected by name through ``SCHEDULING_POLICIES``."""

from policies.scheduling.base import SCHEDULING_POLICIES, SchedulingPolicy
from policies.scheduling.gang import GangSchedulingPolicy

__all__ = ["SCHEDULING_POLICIES", "GangSchedulingPolicy", "SchedulingPolicy"]
