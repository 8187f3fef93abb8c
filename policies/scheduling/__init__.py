"""Scheduling policies, selected by name through ``SCHEDULING_POLICIES``."""

from policies.scheduling.base import SCHEDULING_POLICIES, SchedulingPolicy
from policies.scheduling.capped import TeamCaps
from policies.scheduling.gang import GangSchedulingPolicy
from policies.scheduling.pollux import PolluxSchedulingPolicy
from policies.scheduling.shared import SharedSchedulingPolicy
from policies.scheduling.shared_genetic import SharedGeneticSchedulingPolicy
from policies.scheduling.static_partition import StaticPartitionSchedulingPolicy
from policies.scheduling.strict_priority import StrictPrioritySchedulingPolicy
from policies.scheduling.tiresias import TiresiasSchedulingPolicy

__all__ = [
    "SCHEDULING_POLICIES",
    "GangSchedulingPolicy",
    "PolluxSchedulingPolicy",
    "SchedulingPolicy",
    "SharedGeneticSchedulingPolicy",
    "SharedSchedulingPolicy",
    "StaticPartitionSchedulingPolicy",
    "StrictPrioritySchedulingPolicy",
    "TeamCaps",
    "TiresiasSchedulingPolicy",
]
