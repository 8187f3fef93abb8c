"""Simulator errors: each derives from the control plane's :class:`OrchError`."""

from __future__ import annotations

from orchestrator.errors import OrchError


class SimError(OrchError):
    """Root of the simulator's errors."""


class TraceError(SimError):
    """A trace or profile file is missing or malformed (the message names the file and row)."""

    exit_code = 2


class PolicyViolation(SimError):
    """A policy returned a decision that breaks its contract (over-allocation, unknown job)."""
