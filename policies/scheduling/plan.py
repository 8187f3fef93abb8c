"""Admission with a plan (issue 26): can a deadline job be fitted beside the jobs admitted?

At submission (and whenever capacity changes) a deadline job is checked against a **plan**: a
timeline of the GPUs free in the future, built from a snapshot (ElasticFlow, ASPLOS'23):

* GPUs free now are free from now on, and so are those of running best-effort jobs (bulk
  jobs without a deadline, or declined: ``Snapshot.declined``): the deadline class comes
  before them, they are its victims;
* a running deadline job keeps its minimum satisfactory share (what it holds beyond is
  growth, which the class's shares come before) and frees it when its remaining work is done
  on it (what is left of its start-up first at its current size; a restart and the work
  since its checkpoint at a smaller one); one that can no longer make its deadline keeps
  nothing (it runs best effort); a job whose remaining work is unknown never frees its GPUs
  within the plan (interactive jobs included: they end when their user says so);
* the queued deadline jobs already there are planned first, earliest deadline first, each on
  its minimum satisfactory share (:func:`~policies.scheduling.deadlines.min_share` with no
  restart owed beyond the start) at the earliest time that share is free for its whole run;
  a queued job no plan can fit, or declined before, is left out (it runs best effort).

The new job is then placed the same way on each size in ``lo..hi``: the **verdict** is whether
the earliest finish (start, restart and the run at that size, the margin kept) is by its
deadline, and **earliest** is that earliest finish over every size: the deadline it could have
been given. A declined job runs best effort (``shared`` gives it no share while it cannot make
it); ``--strict`` refuses it instead. This **forecast** (:func:`plan_round`) is what the
admission events say and what the scheduler publishes for ``--strict``.

A **binding** verdict (:func:`plan_round_binding`; ``shared(plan=True)`` keeps declined jobs
out of its deadline class) takes ElasticFlow's test instead: the admitted deadline jobs,
queued and running, and the new one, all planned EDF on their fewest GPUs, all meet their
deadlines. Running jobs are movable there (one whose slack absorbs a restart may give way to
an earlier deadline, as in ``shared``'s class), which the forecast's pinned plan is not:
binding the forecast declined jobs that the class would have saved (see
``bench/scheduler/README.md``, issue 26 part 3).

Pure and deterministic: the same snapshot gives the same verdict, live and simulated.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, replace

from policies.preemption.base import lost_work
from policies.scheduling.deadlines import min_share
from policies.snapshot import QueuedJob, RunningJob, Snapshot


@dataclass(frozen=True, slots=True)
class Verdict:
    """The plan's answer for one deadline job.

    Attributes:
        job_id: the job.
        admitted: its deadline fits the plan.
        earliest: the earliest time it could be done (``math.inf``: no size ever fits).
        start: when the plan starts it (``math.inf`` when never).
        gpus: the size the plan gives it: the fewest that meet the deadline when admitted,
            else the size of the earliest finish (0 when never).
        reason: one line for the user.
    """

    job_id: str
    admitted: bool
    earliest: float
    start: float
    gpus: int
    reason: str


class Timeline:
    """Free GPUs over time: a step function from ``now``, reserved piece by piece.

    Args:
        now: the plan's start.
        free: GPUs free at ``now``.
        releases: ``(time, gpus)`` freed later.
    """

    def __init__(self, now: float, free: int, releases: list[tuple[float, int]]) -> None:
        self.times = [now]
        self.free = [free]
        for t, n in sorted(releases):
            if t <= self.times[-1]:
                self.free[-1] += n
            else:
                self.times.append(t)
                self.free.append(self.free[-1] + n)

    @classmethod
    def from_steps(cls, now: float, steps: Sequence[tuple[float, int]]) -> Timeline:
        """The timeline whose free GPUs are ``steps`` (``(time, free from then)``, in time
        order, as :meth:`steps` gives them), from ``now`` on (a later clock than the plan's:
        the steps before it are past)."""
        if not steps:
            return cls(now, 0, [])
        past = [f for t, f in steps if t <= now]
        free = past[-1] if past else steps[0][1]
        later = [(t, f) for t, f in steps if t > now]
        prev = [free, *(f for _, f in later)]
        return cls(now, free, [(t, f - p) for (t, f), p in zip(later, prev, strict=False)])

    def steps(self) -> list[tuple[float, int]]:
        """``(time, free from then)`` of each step, in time order."""
        return list(zip(self.times, self.free, strict=True))

    def earliest(self, gpus: int, length: float) -> float:
        """The earliest time from which ``gpus`` GPUs are free for ``length`` seconds.

        One pass: the start of each run of steps with enough free is the only candidate in
        that run (a later one in it ends later, at the same step that lacks them).
        """
        times, free = self.times, self.free
        start = -1  # the first step of the current run with enough free (-1: none)
        for i, t in enumerate(times):
            if free[i] >= gpus:
                if start < 0:
                    start = i
            elif start >= 0:
                if t >= times[start] + length:
                    return times[start]
                start = -1
        return times[start] if start >= 0 else math.inf

    def reserve(self, start: float, end: float, gpus: int) -> None:
        """Take ``gpus`` GPUs over ``[start, end)``."""
        times, free = self.times, self.free
        for t in (start, end):
            i = bisect_left(times, t)
            if math.isfinite(t) and (i == len(times) or times[i] != t):
                times.insert(i, t)
                free.insert(i, free[i - 1])
        for k in range(bisect_left(times, start), bisect_left(times, end)):
            free[k] -= gpus


def timeline(snapshot: Snapshot, margin_frac: float = 0.1) -> Timeline:
    """The snapshot's free GPUs over time, before any queued job is planned: free now, or
    held by a best-effort job, or beyond a running deadline job's share, or freed when a
    deadline job is done (see the module docstring)."""
    now, declined = snapshot.now, snapshot.declined
    free = sum(snapshot.free().values())
    releases = []
    for r in snapshot.running:
        if r.interactive:
            continue  # it holds its GPUs for good
        if r.deadline is None or r.job_id in declined:
            free += r.gpus  # best effort: a victim of the deadline class
            continue
        keep, t = _kept(r, snapshot, margin_frac)
        free += r.gpus - keep
        if math.isfinite(t):
            releases.append((t, keep))
    return Timeline(now, free, releases)


def _kept(r: RunningJob, snapshot: Snapshot, margin_frac: float) -> tuple[int, float]:
    """The GPUs a running deadline job keeps in the plan, its minimum satisfactory share
    (beyond it, growth: the class's floors come first; all of them when its work is unknown),
    and when it frees them (``math.inf``: never; a job that can no longer make its deadline
    keeps nothing: it runs best effort)."""
    now, gpus = snapshot.now, r.gpus
    if r.remaining_work is None:
        return gpus, math.inf
    lost = lost_work(r, now) / gpus if gpus else 0.0
    s = min_share(
        r, r.lo, gpus, gpus, now, snapshot.restart_cost_s, snapshot.interval_s, margin_frac, lost
    )
    if s is None:
        return 0, now
    if s.share == gpus:
        return gpus, running_release(r, now)
    rate = r.rate(s.share)
    run = (r.remaining_work + lost) * r.rate(gpus) / rate if rate > 0.0 else math.inf
    return s.share, now + snapshot.restart_cost_s + run


def _place(
    plan: Timeline, job: QueuedJob, restart_cost_s: float, margin_frac: float
) -> tuple[float, float, int, bool]:
    """``(start, finish, gpus, meets)`` of ``job`` on ``plan``: the fewest GPUs that meet its
    deadline at their earliest start, else the earliest finish of any size."""
    left = job.remaining_work
    deadline = job.deadline
    assert left is not None and deadline is not None
    base = job.rate(job.gpus)
    best = (math.inf, math.inf, 0)
    for n in range(job.lo, job.hi + 1):
        rate = job.rate(n)
        if rate <= 0.0:
            continue
        run = restart_cost_s + left * base / rate * (1.0 + margin_frac)
        start = plan.earliest(n, run)
        finish = start + run
        if finish <= deadline:
            return start, finish, n, True
        if finish < best[1]:
            best = (start, finish, n)
    return best[0], best[1], best[2], False


def _planned(q: QueuedJob) -> bool:
    return not q.interactive and q.deadline is not None and q.remaining_work is not None


def _edf(q: QueuedJob | RunningJob) -> tuple[float, int, str]:
    assert q.deadline is not None
    return (q.deadline, q.seq, q.job_id)


def base_plan(snapshot: Snapshot, skip: Collection[str] = (), margin_frac: float = 0.1) -> Timeline:
    """The plan a new deadline job is judged on: the snapshot's timeline with its queued
    deadline jobs (but those in ``skip``) planned first, EDF, each that meets its deadline
    holding its place (one no plan can fit is left out: it runs best effort)."""
    plan = timeline(snapshot, margin_frac)
    restart = snapshot.restart_cost_s
    skip = {*skip, *snapshot.declined}
    for q in sorted((q for q in snapshot.queue if q.job_id not in skip and _planned(q)), key=_edf):
        start, finish, n, meets = _place(plan, q, restart, margin_frac)
        if meets:
            plan.reserve(start, finish, n)
    return plan


def plan_jobs(
    plan: Timeline,
    jobs: Iterable[QueuedJob],
    now: float,
    restart_cost_s: float,
    margin_frac: float = 0.1,
) -> list[Verdict]:
    """Verdicts for the deadline ``jobs`` (with a known remaining work) on ``plan``, EDF,
    each admitted one reserving its place on ``plan`` before the next is judged."""
    out = []
    for q in sorted((q for q in jobs if _planned(q)), key=_edf):
        start, finish, n, meets = _place(plan, q, restart_cost_s, margin_frac)
        if meets:
            plan.reserve(start, finish, n)
        out.append(_verdict(q, now, start, finish, n, meets))
    return out


def plan_round(snapshot: Snapshot, new: Collection[str], margin_frac: float = 0.1) -> list[Verdict]:
    """Verdicts for the queued deadline jobs named in ``new``, on one plan.

    The other queued deadline jobs (those admitted before) are planned first, EDF
    (:func:`base_plan`); then the new ones, EDF (:func:`plan_jobs`). A job of ``new`` without
    a deadline or remaining work gets no verdict.
    """
    fresh = [q for q in snapshot.queue if q.job_id in new and _planned(q)]
    if not fresh:
        return []
    plan = base_plan(snapshot, new, margin_frac)
    return plan_jobs(plan, fresh, snapshot.now, snapshot.restart_cost_s, margin_frac)


def _verdict(
    job: QueuedJob, now: float, start: float, finish: float, n: int, meets: bool
) -> Verdict:
    assert job.deadline is not None
    if meets:
        why = (
            f"admitted: the plan runs it on {n} GPUs, starting in {start - now:.0f} s, done in "
            f"{finish - now:.0f} s ({job.deadline - finish:.0f} s before its deadline)"
        )
    elif math.isfinite(finish):
        why = (
            f"declined: runs best effort; the earliest it could be done is in "
            f"{finish - now:.0f} s ({finish - job.deadline:.0f} s after its deadline)"
        )
    else:
        why = "declined: runs best effort; no size fits the plan"
    return Verdict(job.job_id, meets, finish, start, n, why)


def plan_admission(snapshot: Snapshot, job: QueuedJob, margin_frac: float = 0.1) -> Verdict:
    """The verdict for deadline ``job`` against ``snapshot``'s plan (see the module docstring).

    ``job`` need not be in ``snapshot`` (at submission it is not yet); if it is, it is not
    planned twice. A job without a deadline or a remaining work is not in the plan: its
    verdict says best effort (``admitted`` False, ``earliest`` inf).
    """
    if job.deadline is None or job.remaining_work is None:
        why = "no deadline" if job.deadline is None else "remaining work unknown"
        return Verdict(job.job_id, False, math.inf, math.inf, 0, f"best effort: {why}")
    queue = (*(q for q in snapshot.queue if q.job_id != job.job_id), job)
    (verdict,) = plan_round(replace(snapshot, queue=queue), {job.job_id}, margin_frac)
    return verdict


def running_release(job: RunningJob, now: float) -> float:
    """When ``job`` frees its GPUs in the plan (``math.inf``: unknown)."""
    left = job.remaining_work
    if left is None or job.interactive:
        return math.inf
    first = job.first_step_at
    return now + (first - now if first is not None and first > now else 0.0) + left


# ---- the binding test: every admitted job still meets its deadline (ElasticFlow) ------------


def _place_running(
    plan: Timeline, r: RunningJob, now: float, restart_cost_s: float, margin_frac: float
) -> tuple[float, float, int, bool]:
    """:func:`_place` of a running deadline job: its own size from now costs what is left of
    its start-up; any other size, or a later start, the restart and the work since its
    checkpoint, redone."""
    left, deadline, cur = r.remaining_work, r.deadline, r.gpus
    assert left is not None and deadline is not None
    first = r.first_step_at
    wait = first - now if first is not None and first > now else 0.0
    lost = lost_work(r, now) / cur if cur else 0.0
    base = r.rate(cur)
    best = (math.inf, math.inf, 0)
    for n in range(r.lo, r.hi + 1):
        rate = r.rate(n)
        if rate <= 0.0:
            continue
        if n == cur:
            run = wait + left * (1.0 + margin_frac)
            if plan.earliest(n, run) == now:
                if now + run <= deadline:
                    return now, now + run, n, True
                continue
        run = restart_cost_s + (left + lost) * base / rate * (1.0 + margin_frac)
        start = plan.earliest(n, run)
        if start + run <= deadline:
            return start, start + run, n, True
        if start + run < best[1]:
            best = (start, start + run, n)
    return best[0], best[1], best[2], False


def _edf_plan(
    free: Timeline,
    jobs: list[QueuedJob | RunningJob],
    snapshot: Snapshot,
    margin_frac: float,
    drop: bool = False,
) -> tuple[Timeline, dict[str, tuple[float, float, int]] | None]:
    """``jobs`` placed EDF on a copy of ``free``: the plan, and each one's ``(start, finish,
    GPUs)`` (``None``: one of them misses its deadline; ``drop``: such a job is left out)."""
    plan = Timeline.from_steps(snapshot.now, free.steps())
    now, restart = snapshot.now, snapshot.restart_cost_s
    placed = {}
    for j in sorted(jobs, key=_edf):
        if isinstance(j, RunningJob):
            start, finish, n, meets = _place_running(plan, j, now, restart, margin_frac)
        else:
            start, finish, n, meets = _place(plan, j, restart, margin_frac)
        if not meets:
            if drop:
                continue
            return plan, None
        plan.reserve(start, finish, n)
        placed[j.job_id] = (start, finish, n)
    return plan, placed


def plan_round_binding(
    snapshot: Snapshot, new: Collection[str], margin_frac: float = 0.1
) -> list[Verdict]:
    """Verdicts for the queued deadline jobs in ``new`` by ElasticFlow's admission test: a
    job is admitted when the admitted deadline jobs (queued or running, but those that can no
    longer make it) and it, all planned EDF, each on the fewest GPUs that meet its deadline
    (a running job keeping its size from now without a restart), all meet their deadlines.
    Running deadline jobs are movable here: a new job with an earlier deadline may take GPUs
    from one whose slack absorbs it, as ``shared``'s class does. A declined job's ``earliest``
    is its earliest finish after the admitted ones."""
    fresh = sorted((q for q in snapshot.queue if q.job_id in new and _planned(q)), key=_edf)
    if not fresh:
        return []
    now, declined = snapshot.now, snapshot.declined
    free = sum(snapshot.free().values())
    held: list[QueuedJob | RunningJob] = [
        q
        for q in snapshot.queue
        if q.job_id not in new and q.job_id not in declined and _planned(q)
    ]
    for r in snapshot.running:
        if r.interactive:
            continue
        dl = r.deadline is not None and r.job_id not in declined and r.remaining_work is not None
        if r.deadline is None or r.job_id in declined:
            free += r.gpus  # best effort
        elif dl and _kept(r, snapshot, margin_frac)[0] > 0:
            free += r.gpus  # planned below, movable
            held.append(r)
        elif r.remaining_work is None:
            continue  # it holds its GPUs for good
        else:
            free += r.gpus  # it can no longer make it: best effort
    empty = Timeline(now, free, [])
    # an admitted job that no plan fits any more is lost (it runs best effort): not held
    after: Timeline | None
    after, kept = _edf_plan(empty, held, snapshot, margin_frac, drop=True)
    held = [j for j in held if kept and j.job_id in kept]
    out = []
    for q in fresh:
        _, placed = _edf_plan(empty, [*held, q], snapshot, margin_frac)
        if placed is not None:
            held.append(q)
            start, finish, n = placed[q.job_id]
            out.append(_verdict(q, now, start, finish, n, True))
            after = None  # the admitted ones changed: planned again when needed
            continue
        if after is None:
            after, _ = _edf_plan(empty, held, snapshot, margin_frac)
        # its earliest after the admitted ones (_place reserves nothing)
        start, finish, n, _meets = _place(after, q, snapshot.restart_cost_s, margin_frac)
        out.append(_verdict(q, now, start, finish, n, False))
    return out
