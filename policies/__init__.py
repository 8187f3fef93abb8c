"""Pure decision logic: no Ray, Redis, torch or orchestrator imports.

Input: an immutable :class:`Snapshot`. Output: :class:`Decision` values. The same objects run in
the live scheduler and in a simulator; they are deterministic for the same snapshot and seed.
"""

from policies.decisions import Decision, DecisionKind
from policies.elastic import ELASTIC, ElasticAllocation, ElasticJob
from policies.history import JobHistory, RunEnd, advance
from policies.placement import PLACEMENTS, PackPlacement, Placement, SpreadPlacement
from policies.preemption import PREEMPTIONS, Preemption
from policies.queue import QUEUE_ORDERS, ClassFifoQueue, FifoQueue, QueueOrder
from policies.registry import Registry, UnknownPolicyError
from policies.scheduling import SCHEDULING_POLICIES, GangSchedulingPolicy, SchedulingPolicy
from policies.sharing import SHARINGS, TeamSharing
from policies.snapshot import NodeView, QueuedJob, RunningJob, Snapshot, TeamView

__all__ = [
    "ELASTIC",
    "PLACEMENTS",
    "PREEMPTIONS",
    "QUEUE_ORDERS",
    "SCHEDULING_POLICIES",
    "SHARINGS",
    "ClassFifoQueue",
    "Decision",
    "DecisionKind",
    "ElasticAllocation",
    "ElasticJob",
    "FifoQueue",
    "GangSchedulingPolicy",
    "JobHistory",
    "NodeView",
    "PackPlacement",
    "Placement",
    "Preemption",
    "QueueOrder",
    "QueuedJob",
    "Registry",
    "RunEnd",
    "RunningJob",
    "SchedulingPolicy",
    "Snapshot",
    "SpreadPlacement",
    "TeamSharing",
    "TeamView",
    "UnknownPolicyError",
    "advance",
]
