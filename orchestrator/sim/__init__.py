"""Trace-driven simulator: the live scheduler's policies on a simulated clock.

No Ray, Redis or torch here. ``Simulator`` drives any ``policies.SchedulingPolicy`` over a
trace (``read_trace``, ``pollux_workload``, ``philly_jobs``) on a pool of nodes, with job
performance from measured profiles (Pollux apps) or a parametric model. ``orch sim TRACE``
(:mod:`orchestrator.sim.cli`) runs a user's trace under several policies and compares them.
"""

from orchestrator.sim.config import SimConfig
from orchestrator.sim.engine import Simulator, uniform_pool
from orchestrator.sim.errors import (
    PolicyViolation,
    SimError,
    StuckSimulation,
    TraceError,
    UnplaceableJobs,
)
from orchestrator.sim.metrics import SimOutcome, SimResult, summarize
from orchestrator.sim.trace import TraceJob, philly_jobs, pollux_workload, read_trace, write_trace
from orchestrator.teams import TeamConfig, TeamSpec, load_teams

__all__ = [
    "PolicyViolation",
    "SimConfig",
    "SimError",
    "SimOutcome",
    "SimResult",
    "Simulator",
    "StuckSimulation",
    "TeamConfig",
    "TeamSpec",
    "TraceError",
    "TraceJob",
    "UnplaceableJobs",
    "load_teams",
    "philly_jobs",
    "pollux_workload",
    "read_trace",
    "summarize",
    "uniform_pool",
    "write_trace",
]
