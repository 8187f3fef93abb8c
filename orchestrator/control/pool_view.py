"""The pool view the loop publishes for `orch pool` and the dashboard (pure)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.pool import NodeInfo, nodes_to_json
from policies import Snapshot, TeamView
from policies.scheduling.plan import Timeline

__all__ = ["pool_view", "team_usage"]


def pool_view(
    nodes: Sequence[NodeInfo],
    holding: Mapping[str, tuple[str, tuple[str, ...]]],
    snapshot: Snapshot,
    *,
    at: float,
    scheduler: str,
    policy: str,
    warm: Mapping[str, tuple[int, int]] | None = None,
    plan: Timeline | None = None,
    margin_frac: float = 0.1,
    absent: Sequence[NodeInfo] = (),
) -> dict[str, Any]:
    """The published view: nodes with GPUs used, each job's GPUs, each team's use, and the
    admission plan (free GPUs over time, the admitted deadline jobs in place: a submission
    with ``--strict`` is judged on it; see ``orchestrator.sla.plan_verdicts``).

    Args:
        holding: job id -> ``(team, node of each GPU it holds)``.
        warm: node id -> ``(warm workers, of which holding a GPU)`` (``Runtime.warm_workers``);
            a warm worker's GPU is free to the scheduler, so it is not in ``used_gpus``.
        plan: the plan (:func:`policies.scheduling.plan.base_plan` of ``snapshot``).
        margin_frac: the margin the plan keeps (the admission desk's).
        absent: nodes gone from the pool lately (``absent_nodes``; the loop's
            ``ABSENT_KEPT_S``): a submission is judged against the pool with them.
    """
    held = Counter(n for _, job_nodes in holding.values() for n in job_nodes)
    warm = warm or {}
    steps = [] if plan is None else [[round(t, 3), f] for t, f in plan.steps()]
    return {
        "plan": {
            "steps": steps,
            "restart_cost_s": snapshot.restart_cost_s,
            "margin_frac": margin_frac,
        },
        "at": at,
        "scheduler": scheduler,
        "policy": policy,
        "nodes": [
            {
                **n,
                "used_gpus": held.get(n["node_id"], 0),
                "warm_workers": warm.get(n["node_id"], (0, 0))[0],
                "warm_gpus": warm.get(n["node_id"], (0, 0))[1],
            }
            for n in nodes_to_json(list(nodes))
        ],
        "absent_nodes": nodes_to_json(list(absent)),
        "jobs": {job_id: list(job_nodes) for job_id, (_, job_nodes) in holding.items()},
        # whose each job is: the API shows a member only its own team's (operations.pool_for)
        "job_teams": {job_id: team for job_id, (team, _) in holding.items()},
        "teams": team_usage(
            snapshot.teams,
            [(team, len(job_nodes)) for team, job_nodes in holding.values()],
            [(q.team, q.lo) for q in snapshot.queue],
        ),
    }


def team_usage(
    teams: tuple[TeamView, ...],
    running: list[tuple[str, int]],
    queued_jobs: list[tuple[str, int]],
) -> list[dict[str, Any]]:
    """Each team's GPUs in use against its guarantee and limit, what it borrows (uses beyond
    its guarantee), and the GPUs its queued jobs need at least; configured teams first, then
    any other with jobs.

    Args:
        teams: the team config.
        running: ``(team, GPUs held)`` of each running job.
        queued_jobs: ``(team, fewest GPUs)`` of each queued job.
    """
    used: Counter[str] = Counter()
    for team, n in running:
        used[team] += n
    queued: Counter[str] = Counter()
    for team, n in queued_jobs:
        queued[team] += n
    config = {t.name: t for t in teams}
    names = list(config) + sorted((set(used) | set(queued)) - set(config))
    rows = []
    for name in names:
        t = config.get(name)
        guarantee = t.guaranteed_gpus if t else 0
        rows.append(
            {
                "team": name,
                "used_gpus": used[name],
                "guaranteed_gpus": guarantee,
                "max_gpus": t.max_gpus if t else 0,
                "weight": t.weight if t else 1.0,
                "borrowed_gpus": max(0, used[name] - guarantee),
                "queued_gpus": queued[name],
                "configured": t is not None,
            }
        )
    return rows
