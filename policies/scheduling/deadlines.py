"""The deadline class of ``shared`` (issue 26): minimum satisfactory shares, EDF, slack.

A bulk job with a deadline and a known ``remaining_work`` is a **deadline job**. Each round:

* its **minimum satisfactory share** is the fewest GPUs in ``lo..hi`` on which it meets its
  deadline from now, on its speedup curve (ElasticFlow, ASPLOS'23). Its remaining work is
  measured on a reference size (the GPUs it holds when running, else the GPUs it asked for, as
  the live loop measures it). Keeping a running job's size costs only what is left of its
  start-up (until ``first_step_at``); any other size costs the restart and the work since its
  checkpoint, redone (``lost_s``). The finish must keep a margin of ``margin_frac`` of the
  remaining run time (what a prediction from a measured rate cannot see);
* a job no size meets in time is **lost**: it runs best effort, like a job without a deadline
  (serving it first would only make others miss theirs too: EDF's domino effect when
  overloaded), unless it has at most ``short_s`` of work left (``shared``'s
  ``short_first_s``): then its share is its size, and EDF puts it first (it is due soonest);
* the others are admitted **earliest deadline first** (Liu and Layland 1973), each on its
  share, while the shares fit the GPUs the deadline class may use (:func:`admit_edf`); a job
  whose share does not fit first displaces admitted jobs whose **slack absorbs** the loss (they
  meet their deadline even when they restart a round later on their ``hi`` GPUs, the work since
  their checkpoint redone), the most slack first; else it runs best effort this round.

What a deadline job is given beyond its share is growth: it comes after every other job's
admission (``shared`` gives it by goodput), so growth never reclaims nor preempts.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from policies.elastic import ElasticJob
from policies.snapshot import QueuedJob, RunningJob, Snapshot


@dataclass(frozen=True, slots=True)
class DeadlineShare:
    """A deadline job's place in one round.

    Attributes:
        job_id: the job.
        team: its team.
        deadline: when its work must be done.
        seq: its submission order (ties of EDF).
        share: its minimum satisfactory share (GPUs).
        current: the GPUs it holds (0: queued).
        slack: seconds it could wait, restarting on its ``hi`` GPUs a round later with its
            lost work redone, and still meet its deadline (negative: it cannot absorb a stop).
        can_wait: a queued job that would still meet its deadline on the same share started
            a round later (``shared(defer=True)`` leaves it best effort this round).
    """

    job_id: str
    team: str
    deadline: float
    seq: int
    share: int
    current: int
    slack: float
    can_wait: bool = False

    @property
    def absorbs(self) -> bool:
        """Whether a stop now leaves it able to meet its deadline (see ``slack``)."""
        return self.slack >= 0.0


def _time_on(job: QueuedJob | RunningJob, left: float, ref: int, gpus: int) -> float:
    """Seconds ``left`` seconds of work on ``ref`` GPUs take on ``gpus`` GPUs."""
    if gpus == ref:
        return left
    base, rate = job.rate(ref), job.rate(gpus)
    return math.inf if rate <= 0.0 else left * base / rate


def min_share(
    job: QueuedJob | RunningJob,
    lo: int,
    hi: int,
    cur: int,
    now: float,
    restart_cost_s: float,
    interval_s: float,
    margin_frac: float,
    lost_s: float = 0.0,
    short_s: float = 0.0,
) -> DeadlineShare | None:
    """``job``'s share this round, or ``None``: no deadline, unknown work, or lost.

    Args:
        job: a bulk job.
        lo, hi: the fewest and most GPUs it may have this round (``hi == cur`` for a running
            job that may not change size this round).
        cur: the GPUs it holds (0: queued).
        now: the round's clock.
        restart_cost_s: seconds a start or a resize costs.
        interval_s: the gap to the next round (a stopped job restarts no sooner).
        margin_frac: the margin, a fraction of the remaining run time.
        lost_s: seconds of work since its checkpoint (redone after a change; 0 when queued).
        short_s: a job no size saves, with at most this many seconds of work left (on its
            reference size), is not lost: its share is that size, with no slack (``shared``'s
            ``short_first_s``): EDF admits it first (it is due soonest), it displaces nobody.
    """
    deadline, left = job.deadline, job.remaining_work
    if deadline is None or left is None:
        return None
    ref = cur if cur > 0 else job.gpus
    budget = deadline - now
    share = 0
    for n in range(lo, hi + 1):
        if n == cur:
            first = job.first_step_at if isinstance(job, RunningJob) else None
            wait = first - now if first is not None and first > now else 0.0
            run = left
        else:
            wait = restart_cost_s
            run = _time_on(job, left + lost_s, ref, n)
        if wait + run * (1.0 + margin_frac) <= budget:
            share = n
            break
    if share == 0:
        if left > short_s or not lo <= ref <= hi:
            return None
        # slack 0: it displaces nobody, and is displaced after every job with slack
        return DeadlineShare(job.job_id, job.team, deadline, job.seq, ref, cur, 0.0)
    # a stop now: back a round later on hi GPUs, the restart paid and the lost work redone
    later = interval_s + restart_cost_s + _time_on(job, left + lost_s, ref, hi)
    can_wait = cur == 0 and (
        interval_s + restart_cost_s + _time_on(job, left, ref, share) * (1.0 + margin_frac)
        <= budget - interval_s
    )
    return DeadlineShare(
        job.job_id, job.team, deadline, job.seq, share, cur, budget - later, can_wait
    )


def admit_edf(
    shares: Iterable[DeadlineShare], capacity: int
) -> tuple[list[DeadlineShare], set[str]]:
    """The deadline jobs admitted this round, in EDF order, and the displaced ones.

    Jobs in deadline order (ties: submission) take their share while ``capacity`` lasts. A job
    whose share does not fit displaces admitted jobs whose slack absorbs a stop (most slack
    first) when that makes it fit; a displaced job is not admitted this round (it keeps its
    deadline for the next). A job that does not fit even so is neither (best effort).

    Returns:
        the admitted shares in EDF order, and the ids of the displaced jobs.
    """
    order = sorted(shares, key=lambda s: (s.deadline, s.seq, s.job_id))
    admitted: list[DeadlineShare] = []
    displaced: set[str] = set()
    # admitted jobs that could absorb a stop, most slack first, and their GPUs together
    spare: list[tuple[float, str, int]] = []
    spare_gpus = 0
    left = capacity
    for s in order:
        if s.share > left:
            if s.absorbs or left + spare_gpus < s.share:  # one that can wait displaces nobody
                continue
            while left < s.share:
                _, job_id, gpus = heapq.heappop(spare)
                displaced.add(job_id)
                left += gpus
                spare_gpus -= gpus
        admitted.append(s)
        left -= s.share
        if s.absorbs:
            heapq.heappush(spare, (-s.slack, s.job_id, s.share))
            spare_gpus += s.share
    if displaced:
        admitted = [a for a in admitted if a.job_id not in displaced]
    return admitted, displaced


def shares_of(
    jobs: Sequence[tuple[QueuedJob | RunningJob, int, int, int, float]],
    now: float,
    restart_cost_s: float,
    interval_s: float,
    margin_frac: float,
    short_s: float = 0.0,
) -> list[DeadlineShare]:
    """:func:`min_share` of each ``(job, lo, hi, cur, lost_s)``; lost jobs left out."""
    out: list[DeadlineShare] = []
    for job, lo, hi, cur, lost in jobs:
        s = min_share(job, lo, hi, cur, now, restart_cost_s, interval_s, margin_frac, lost, short_s)
        if s is not None:
            out.append(s)
    return out


def deadline_class(
    dl: Sequence[tuple[QueuedJob | RunningJob, int, int, int, float]],
    capacity: int,
    snapshot: Snapshot,
    margin_frac: float,
    defer: bool = False,
    short_s: float = 0.0,
) -> tuple[list[ElasticJob], dict[str, tuple[str, int]]]:
    """The admitted deadline jobs as an elastic allocator sees them (EDF order, each with its
    minimum satisfactory share as its floor), and ``{job id: (team, share)}`` of them.

    Args:
        dl: ``(job, lo, hi, GPUs held, lost seconds)`` of the deadline jobs that may change
            size this round.
        capacity: the GPUs the class may use (``shared``: the bulk pool less what runs with no
            step yet keep).
        snapshot: the round's snapshot.
        margin_frac: see :func:`min_share`.
        defer: leave out the queued jobs that can start a round later on their share.
        short_s: see :func:`min_share`.
    """
    now = snapshot.now
    shares = shares_of(dl, now, snapshot.restart_cost_s, snapshot.interval_s, margin_frac, short_s)
    if defer:
        shares = [s for s in shares if not s.can_wait]
    admitted, _ = admit_edf(shares, capacity)
    if not admitted:
        return [], {}
    by_id = {row[0].job_id: row for row in dl}
    jobs: list[ElasticJob] = []
    held: dict[str, tuple[str, int]] = {}
    for a in admitted:
        job, lo, hi, cur, lost = by_id[a.job_id]
        started = job.started_at if isinstance(job, RunningJob) else now
        jobs.append(
            ElasticJob(
                a.job_id, lo, hi, job.gpus, cur, job.speedup, a.share, now - started, False, lost
            )
        )
        held[a.job_id] = (a.team, a.share)
    return jobs, held
