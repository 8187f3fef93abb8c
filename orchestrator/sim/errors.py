"""Simulator errors: each derives from the control plane's :class:`OrchError`."""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.errors import OrchError


class SimError(OrchError):
    """Root of the simulator's errors."""


class TraceError(SimError):
    """A trace or profile file is missing or malformed (the message names the file and row)."""

    exit_code = 2


class PolicyViolation(SimError):
    """A policy returned a decision that breaks its contract (over-allocation, unknown job)."""


def _some(jobs: Mapping[str, str], shown: int = 5) -> str:
    """``name (why)`` for the first ``shown`` jobs, on one line."""
    items = [f"{name} ({why})" if why else name for name, why in list(jobs.items())[:shown]]
    more = len(jobs) - shown
    return "; ".join(items) + (f"; and {more} more" if more > 0 else "")


class UnplaceableJobs(SimError):
    """Jobs of the trace that can never start on the pool (refused before the run).

    Attributes:
        jobs: job name -> why it can never start.
    """

    exit_code = 2

    def __init__(self, jobs: Mapping[str, str]) -> None:
        self.jobs = dict(jobs)
        noun = "job" if len(self.jobs) == 1 else "jobs"
        super().__init__(f"{len(self.jobs)} {noun} can never start: {_some(self.jobs)}")


class StuckSimulation(SimError):
    """The run made no progress for ``SimConfig.stuck_rounds`` rounds in a row.

    Attributes:
        jobs: each stuck job -> the policy's last reason for it (queued), or what it holds.
        rounds: the rounds without progress.
        since: the simulated time the last progress was made.
    """

    def __init__(self, jobs: Mapping[str, str], rounds: int, since: float) -> None:
        self.jobs = dict(jobs)
        self.rounds = rounds
        self.since = since
        super().__init__(
            f"no job made progress for {rounds} rounds (since t={since:.0f} s): {_some(self.jobs)}"
        )
