"""The contract every policy's decisions keep, checked the same way live and simulated.

A decision that breaks it (a start for a job that is not queued, a gang on GPUs that are not
free, a size outside the job's range, a GPU on a node too small for the job's
``gpu_memory_gb``) is a :class:`~orchestrator.errors.PolicyViolation`: the
simulator raises it, the live loop logs it and drops that decision (it never reshapes one into
something the policy did not say).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from policies import Decision, DecisionKind, QueuedJob, RunningJob, SchedulingPolicy, Snapshot
from policies.scheduling import TeamCaps

__all__ = ["check_decisions", "guarded"]


def guarded(policy: SchedulingPolicy) -> SchedulingPolicy:
    """The policy as both worlds run it: inside the team caps (``max_gpus`` holds whatever
    the policy)."""
    return policy if isinstance(policy, TeamCaps) else TeamCaps(policy)


def check_decisions(
    snapshot: Snapshot, decisions: Iterable[Decision], *, atomic_moves: bool = False
) -> tuple[list[Decision], list[tuple[Decision, str]]]:
    """Split decisions (in apply order) into those that keep the contract and the others.

    Applying them in order against the snapshot: a ``START`` is for a queued job not started
    yet, a ``PREEMPT`` or ``RESIZE`` for a running job, sizes within the job's range (or
    between a service's size and its ``want_gpus``), every GPU taken is free after the
    releases before it, and no GPU is newly taken on a node whose GPUs have less memory than
    the job needs or are of a kind it does not allow (``Snapshot.barred``; a resize keeps what
    it holds).

    ``atomic_moves`` (the simulator's ``SimConfig.atomic_moves``, for reproductions of
    published simulators; never live): every running job a ``RESIZE`` moves lets go of its
    GPUs before the first decision is applied.

    Returns:
        ``(kept, broken)``, ``broken`` pairing each bad decision with what is wrong with it.
    """
    kept: list[Decision] = []
    broken: list[tuple[Decision, str]] = []
    decisions = list(decisions)
    if all(d.kind is DecisionKind.WAIT for d in decisions):
        # most rounds of a long simulation: nothing but waits, which only name known jobs
        known = {q.job_id for q in snapshot.queue} | {r.job_id for r in snapshot.running}
        for d in decisions:
            if d.job_id in known:
                kept.append(d)
            else:
                broken.append((d, f"WAIT for {d.job_id}, which is not in the snapshot"))
        return kept, broken
    queued = {q.job_id: q for q in snapshot.queue}
    running = {r.job_id: r for r in snapshot.running}
    free = Counter(snapshot.free())
    holding = {r.job_id: r.nodes for r in snapshot.running}
    started: set[str] = set()
    if atomic_moves:
        for d in decisions:
            held = holding.get(d.job_id)
            if d.kind is DecisionKind.RESIZE and held and tuple(d.nodes) != held:
                free.update(held)
                holding[d.job_id] = ()
    for d in decisions:
        problem = _problem(d, queued, running, holding, started, free, snapshot)
        if problem:
            broken.append((d, problem))
        else:
            kept.append(d)
    return kept, broken


def _problem(
    d: Decision,
    queued: dict[str, QueuedJob],
    running: dict[str, RunningJob],
    holding: dict[str, tuple[str, ...]],
    started: set[str],
    free: Counter[str],
    snapshot: Snapshot,
) -> str:
    """What is wrong with ``d`` applied now (``""``: nothing); applies it to ``free``."""
    kind = d.kind
    if kind is DecisionKind.WAIT:
        known = d.job_id in queued or d.job_id in running
        return "" if known else f"WAIT for {d.job_id}, which is not in the snapshot"
    if kind is DecisionKind.PREEMPT:
        if d.job_id not in holding:
            return f"PREEMPT for {d.job_id}, which is not running"
        free.update(holding.pop(d.job_id))
        return ""
    job: QueuedJob | RunningJob | None = (
        queued.get(d.job_id) if kind is DecisionKind.START else running.get(d.job_id)
    )
    if job is None or (kind is DecisionKind.START and d.job_id in started):
        state = "not queued" if kind is DecisionKind.START else "not running"
        return f"{kind.value.upper()} for {d.job_id}, which is {state}"
    if kind is DecisionKind.RESIZE and d.job_id not in holding:
        return f"RESIZE for {d.job_id}, which was preempted in the same round"
    # a service may also be resized towards the replicas the SLA guard asks for (want_gpus;
    # the team caps may stop a grow short of them)
    lo, hi = job.lo, job.hi
    if isinstance(job, RunningJob) and job.want_gpus:
        lo, hi = min(lo, job.want_gpus), max(hi, job.want_gpus)
    if not lo <= len(d.nodes) <= hi:
        return f"{kind.value} {d.job_id} on {len(d.nodes)} GPUs; it runs on {job.lo}..{job.hi}"
    old = Counter(holding.get(d.job_id, ())) if kind is DecisionKind.RESIZE else Counter()
    need = Counter(d.nodes)
    barred = snapshot.barred(job)
    for node, n in need.items():
        if free[node] + old[node] < n:
            return f"{kind.value} {d.job_id}: {n} GPUs on {node}, {free[node] + old[node]} free"
        if n > old[node] and node in barred:
            if node in snapshot.too_small(job.gpu_memory_gb):
                return (
                    f"{kind.value} {d.job_id}: GPUs on {node}, whose GPUs have less memory than "
                    f"its gpu_memory_gb ({job.gpu_memory_gb:g} GB)"
                )
            return (
                f"{kind.value} {d.job_id}: GPUs on {node}, of kind "
                f"{snapshot.kind_of(node) or '(unlabelled)'}, which it does not allow"
            )
    free.update(old)
    free.subtract(need)
    if kind is DecisionKind.START:
        started.add(d.job_id)
    else:
        holding[d.job_id] = tuple(d.nodes)
    return ""
