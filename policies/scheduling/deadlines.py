"""Bulk jobs whose deadline is at risk, least slack first (``shared``'s deadline rule).

A bulk job with a deadline and a known ``remaining_work`` is **at risk** when its work, at the
rate of its current allotment, will not be done by its deadline with a margin:

* a running job, on the GPUs it holds: ``slack = deadline - now - wait - left``, where ``wait``
  is what is left of its start-up (until ``first_step_at``);
* a queued job, started at the next round on the GPUs it asked for:
  ``slack = deadline - now - interval_s - restart_cost_s - left``;

at risk when ``slack < margin_frac * left``, with ``left`` its remaining work (``remaining_work``:
seconds on the GPUs it asked for when queued, on the GPUs it holds when running, as the live
loop measures it). The margin and the next round's gap stand for what a prediction from a
measured rate cannot see.

A job that cannot meet its deadline even on its ``hi`` GPUs (a change of size costs
``restart_cost_s``) is not at risk but lost: it is scheduled like a job without a deadline,
since serving it first would only make others miss theirs too (least-laxity's domino effect
under overload; Dertouzos 1974, Locke 1986).

Least slack first (Mok's least-laxity order) orders the at-risk jobs: the quantity
:func:`policies.queue.slack.slack` orders a queue by, with the start-up and the next round
counted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from policies.snapshot import QueuedJob, RunningJob


@dataclass(frozen=True, slots=True)
class AtRisk:
    """A bulk job whose deadline is at risk.

    Attributes:
        job_id: the job.
        slack: seconds it could still wait on its current (or asked) GPUs and meet its
            deadline (negative: it cannot on them, only on more).
    """

    job_id: str
    slack: float


def at_risk(
    jobs: Iterable[tuple[QueuedJob | RunningJob, int, int, int]],
    now: float,
    restart_cost_s: float,
    interval_s: float,
    margin_frac: float,
) -> list[AtRisk]:
    """The at-risk jobs among ``jobs``, least slack first (ties: job id).

    Args:
        jobs: ``(job, lo, hi, cur)`` of bulk jobs: ``cur`` the GPUs a running job holds (0:
            queued); ``hi`` the most it may have this round. Jobs without a deadline or a
            remaining work are skipped.
        now: the round's clock.
        restart_cost_s: seconds a start or resize costs.
        interval_s: the gap until the next round (a queued job starts no earlier).
        margin_frac: the margin, as a fraction of the remaining run time.
    """
    out: list[AtRisk] = []
    for job, _lo, hi, cur in jobs:
        deadline, left = job.deadline, job.remaining_work
        if deadline is None or left is None:
            continue
        if cur > 0:
            first = job.first_step_at if isinstance(job, RunningJob) else None
            ref, wait = cur, (first - now if first is not None and first > now else 0.0)
        else:
            ref, wait = job.gpus, interval_s + restart_cost_s
        slack = deadline - now - wait - left
        if slack >= margin_frac * left:
            continue  # on time at its current (or asked) size
        if slack < 0.0:  # late on these GPUs: is it in time on hi (with a restart)?
            base, top = job.rate(ref), job.rate(hi)
            start = now + (interval_s if cur <= 0 else 0.0) + restart_cost_s
            if hi <= ref or top <= 0.0 or start + left * base / top > deadline:
                continue  # lost: scheduled as if it had no deadline
        out.append(AtRisk(job.job_id, slack))
    out.sort(key=lambda a: (a.slack, a.job_id))
    return out
