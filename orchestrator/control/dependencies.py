"""The loop's gate on job dependencies: a queued job that names jobs in ``depends_on`` is held
out of the policy's snapshot until they have all finished, and fails when one of them fails,
is cancelled or is gone (removed by ``orch gc``: whether it finished cannot be told).

The ids come resolved from submission (the job's ``after`` field,
:mod:`orchestrator.store.dependencies`). A held job is not in the snapshot, so no policy sees
it, in the live loop as in the simulator (whose traces have no dependencies); it waits queued
with its reason as its message. A job whose dependencies have all finished is remembered as
ready: a finished job never changes again.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from orchestrator.store.dependencies import NEVER

__all__ = ["DependencyGate"]


@dataclass
class DependencyGate:
    """Which queued jobs may be scheduled, as far as their dependencies go.

    Attributes:
        after: each held job's dependencies (ids), as read from its ``after`` field.
    """

    after: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def note(self, job_id: str, raw_after: str | None) -> None:
        """Record a queued job's dependencies (its stored ``after`` field) when it has any."""
        deps = tuple(d for d in (raw_after or "").split(",") if d)
        if deps:
            self.after[job_id] = deps

    def judge(
        self, queued: set[str], states: Callable[[set[str]], Mapping[str, str | None]]
    ) -> tuple[set[str], dict[str, str], dict[str, str]]:
        """Judge the queued jobs that have dependencies.

        Args:
            queued: the ids now queued.
            states: the current state of each of a set of jobs (``None``: gone).

        Returns:
            ``(held, waits, fails)``: the jobs to keep out of the snapshot; why each waits
            (the dependencies not finished yet); and why each must fail.
        """
        pending = {j: d for j, d in self.after.items() if j in queued}
        self.after = pending  # jobs that left the queue are forgotten
        if not pending:
            return set(), {}, {}
        now = states({d for deps in pending.values() for d in deps})
        held: set[str] = set()
        waits: dict[str, str] = {}
        fails: dict[str, str] = {}
        for job_id, deps in builtins.list(pending.items()):
            never = [f"{d} {now.get(d) or 'is gone'}" for d in deps if _never(now.get(d))]
            open_ = [
                f"{d} ({now[d]})" for d in deps if not _never(now.get(d)) and now[d] != "finished"
            ]
            if never:
                fails[job_id] = f"a job it depends on will never finish: {', '.join(never)}"
                held.add(job_id)
            elif open_:
                waits[job_id] = f"after {', '.join(open_)}"
                held.add(job_id)
            else:
                del self.after[job_id]  # all finished: ready, for good
        return held, waits, fails


def _never(state: str | None) -> bool:
    return state is None or state in NEVER
