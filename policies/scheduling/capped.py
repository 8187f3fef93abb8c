"""Team caps (``max_gpus``) on top of any scheduling policy.

A team's ``max_gpus`` is a hard limit on what it may hold, borrowing included, whatever the policy.
Rather than teach every policy about it, :class:`TeamCaps` wraps one:

1. **Before** the policy decides, a queued job whose team has no room left for its minimum is
   held (a ``WAIT`` saying so) and never shown to the policy, so no job is preempted to make room
   for a job that could not start anyway; jobs that fit are shown with their maximum narrowed to
   the team's room, and running elastic jobs (and services the SLA guard asks to grow) may
   grow only into that room.
2. **After**, the decisions are replayed in apply order with each team's running total: a start
   that would still take a team over its cap (several of its jobs fitting one by one, not all
   together) becomes a ``WAIT``, and such a grow is dropped (the job keeps its GPUs).

A job admitted before its team's cap was lowered keeps its GPUs; it only cannot grow.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from policies.decisions import Decision, DecisionKind
from policies.scheduling.base import SchedulingPolicy
from policies.snapshot import QueuedJob, RunningJob, Snapshot


class TeamCaps(SchedulingPolicy):
    """Enforce each team's ``max_gpus`` around ``inner``.

    Args:
        inner: the policy that decides within the caps.
    """

    def __init__(self, inner: SchedulingPolicy) -> None:
        self.inner = inner
        self.binds_admission = inner.binds_admission

    def decide(self, snapshot: Snapshot) -> list[Decision]:
        """See :meth:`SchedulingPolicy.decide`."""
        caps = {t.name: t.max_gpus for t in snapshot.teams if t.max_gpus > 0}
        if not caps:
            return self.inner.decide(snapshot)
        held: Counter[str] = Counter()
        for r in snapshot.running:
            held[r.team] += r.gpus
        held_back: list[Decision] = []
        queue: list[QueuedJob] = []
        for q in snapshot.queue:
            cap = caps.get(q.team)
            room = 0 if cap is None else cap - held[q.team]
            if cap is None or q.hi <= room:
                queue.append(q)
            elif q.lo > room:
                held_back.append(
                    Decision(
                        DecisionKind.WAIT,
                        q.job_id,
                        reason=(
                            f"team {q.team} holds {held[q.team]} of its {cap}-GPU limit "
                            f"(max_gpus); this job needs {q.lo}"
                        ),
                    )
                )
            else:  # fits, but not at its largest
                queue.append(
                    dataclasses.replace(
                        q, gpus=max(q.lo, min(q.gpus, room)), min_gpus=q.lo, max_gpus=room
                    )
                )
        running: list[RunningJob] = []
        for r in snapshot.running:
            cap = caps.get(r.team)
            top = r.gpus + max(0, (cap or 0) - held[r.team])
            if cap is not None and r.hi > top:
                r = dataclasses.replace(r, min_gpus=r.lo, max_gpus=max(r.lo, top))
            if cap is not None and r.want_gpus > top:  # a service grows only into the room
                r = dataclasses.replace(r, want_gpus=top if top > r.gpus else 0)
            running.append(r)
        inner = dataclasses.replace(snapshot, queue=tuple(queue), running=tuple(running))
        decisions = self.inner.decide(inner)
        return _replay(decisions, snapshot, caps, held) + held_back


def _replay(
    decisions: list[Decision], snapshot: Snapshot, caps: dict[str, int], held: Counter[str]
) -> list[Decision]:
    """The decisions with any start or grow that would take a team over its cap withdrawn."""
    team = {q.job_id: q.team for q in snapshot.queue}
    size = {r.job_id: r.gpus for r in snapshot.running}
    team.update({r.job_id: r.team for r in snapshot.running})
    use = Counter(held)
    out: list[Decision] = []
    for d in decisions:
        t = team.get(d.job_id, "")
        cap = caps.get(t)
        if d.kind is DecisionKind.PREEMPT:
            use[t] -= size.get(d.job_id, 0)
        elif d.kind is DecisionKind.RESIZE:
            delta = len(d.nodes) - size.get(d.job_id, 0)
            if cap is not None and delta > 0 and use[t] + delta > cap:
                continue  # keeps its GPUs
            use[t] += delta
        elif d.kind is DecisionKind.START:
            if cap is not None and use[t] + len(d.nodes) > cap:
                out.append(
                    Decision(
                        DecisionKind.WAIT,
                        d.job_id,
                        reason=f"team {t} would exceed its {cap}-GPU limit (max_gpus)",
                    )
                )
                continue
            use[t] += len(d.nodes)
        out.append(d)
    return out
