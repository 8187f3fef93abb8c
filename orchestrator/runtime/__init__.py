"""Runtimes: what runs the gangs the control loop decides on (Ray, or in-process for tests).

Nothing here writes job state; see :mod:`orchestrator.runtime.base` for the contract.
"""

from orchestrator.runtime.base import EventKind, Launch, Outcome, OutcomeKind, RunEvent, Runtime

__all__ = ["EventKind", "Launch", "Outcome", "OutcomeKind", "RunEvent", "Runtime"]
