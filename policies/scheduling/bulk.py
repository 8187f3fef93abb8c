"""Admitting bulk jobs over one round: guarantees, what running jobs keep, reclaim, late jobs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from policies.elastic import ElasticJob
from policies.snapshot import QueuedJob, RunningJob

Row = tuple[tuple[int, int, str], QueuedJob | RunningJob, int, int, int, int, float]
"""A bulk job as admission sees it: its sort key (ends with the job id), the job, ``lo``, ``hi``,
the GPUs it holds now (0: queued), the GPUs it asked for (a running job: held in the snapshot),
and when its current allocation started (a queued job: now)."""


class BulkAdmission:
    """A round's bulk jobs as ``elastic`` sees them, in admission groups, row order in each.

    Groups (see :meth:`jobs`):

    1. **Runs with no step yet** keep exactly their GPUs (their floor; no shrink, preemption
       or growth: each would restart the run and throw its start-up away).
    2. **Young jobs** (started less than ``min_runtime_s``, or ``reclaim_min_runtime_s``,
       ago) whose team holds no more than its ``room`` (``young_kept``: whatever their team
       holds) keep their GPUs (their floor), except as a reclaim takes them (below).
    3. **Jobs within their team's room**, each taking its minimum from it.
    4. **The rest** (borrowers).
    5. **Late jobs** (preempted recently, see ``shared``): apart, for the GPUs 1-4 leave.

    Floors: each team's ``guarantee`` counts what its jobs of groups 1 and 2 keep first (issue 28:
    a job it keeps is never displaced for a floor of its own team's other jobs, and a team
    below its guarantee takes the unprotected jobs of a team above its guarantee, not its
    protected ones); the rest is spread over its other jobs in row order, minimums first (a
    late job gets none); ``elastic`` admits floors before anything else.

    Reclaim: a team below its guarantee does not wait for ``min_runtime_s``. When the
    guarantees and what running jobs keep do not fit in the bulk pool together, a team's
    guarantee first counts what its own jobs keep (the rest is spread as floors over its other
    jobs), and teams that keep more than their guarantee give up the excess as far as needed:
    from jobs kept by ``min_runtime_s`` alone (not younger than ``reclaim_min_runtime_s``, and
    past their first step), the last in row order first; a job shrinks when it keeps at least
    its minimum, else it keeps nothing (it is admitted like any other job, and may be
    preempted). This happens only when it makes every guarantee fit: when everything fits
    anyway, or when the guarantees cannot all be met (interactive jobs hold guaranteed GPUs),
    the round is as if there were no reclaim, and admission order decides.

    Args:
        rows: every bulk job, in admission order (LAS order in ``shared``).
        running_rows: the rows of the running jobs (any order).
        room: per team, the GPUs its bulk jobs may hold within its entitlement.
        guarantee: per team, the GPUs its guarantee gives its bulk jobs (interactive ones out).
        late: the queued jobs preempted recently (group 5).
        nostep: the running jobs whose current run has done no step yet.
        touched: the running jobs shrunk this round for an interactive job (not regrown).
        now: the round's clock.
        min_runtime_s: the minimum-runtime protection (against fairness and goodput).
        reclaim_min_runtime_s: the minimum-runtime protection against a guarantee's reclaim.
        lost: fill each running job's ``ElasticJob.lost_s`` (the allocator reads it: see
            ``ElasticAllocation.reads_lost``); else it is 0.
        young_kept: young jobs keep their GPUs against fairness and goodput whatever their
            team holds (not only within its room).
        floor_growth: a team's guarantee left after its jobs' minimums is spread on as floors
            up to their ``hi`` (``False``, ``shared``'s default since issue 26: a guarantee
            protects minimums, never growth).
    """

    def __init__(
        self,
        rows: Sequence[Row],
        running_rows: Sequence[Row],
        room: dict[str, int],
        guarantee: dict[str, int],
        late: set[str],
        nostep: set[str],
        touched: set[str],
        now: float,
        min_runtime_s: float,
        reclaim_min_runtime_s: float,
        lost: bool = False,
        young_kept: bool = False,
        floor_growth: bool = True,
        served: bool = False,
    ) -> None:
        self.rows = rows
        self.running_rows = running_rows
        self.room = room
        self.guarantee = guarantee
        self.late = late
        self.nostep = nostep
        self.touched = touched
        self.now = now
        self.young_s = max(min_runtime_s, reclaim_min_runtime_s)
        self.reclaim_s = reclaim_min_runtime_s
        self.lost = lost
        self.young_kept = young_kept
        self.floor_growth = floor_growth
        self.served = served

    def jobs(self, bulk_pool: int) -> tuple[list[ElasticJob], list[ElasticJob]]:
        """The jobs of groups 1-4 in admission order, and the late jobs, for ``bulk_pool`` GPUs."""
        keep, reclaimable = self._keep()
        floors = self._floors(self._guarantee_left(keep), keep) if self.guarantee else {}
        groups = self._groups(floors, keep)
        if reclaimable and self.guarantee:
            reclaim = self._reclaim(keep, reclaimable, bulk_pool)
            if reclaim is not None:
                groups = self._groups(*reclaim)
        return groups[0] + groups[1] + groups[2] + groups[3], groups[4]

    def _keep(self) -> tuple[dict[str, int], list[tuple[str, str, int, int]]]:
        """What running jobs keep against other bulk jobs (groups 1 and 2), and the reclaimable
        ones: ``(job id, team, lo, GPUs)`` of those kept by ``min_runtime_s`` alone (a
        guarantee may reclaim them), in row order."""
        now, nostep, young_s, reclaim_s = self.now, self.nostep, self.young_s, self.reclaim_s
        keep: dict[str, int] = {}
        reclaimable: list[tuple[str, str, int, int]] = []
        held_team: Counter[str] | None = None  # GPUs held per team, once a young job needs it
        for _, j, lo, _, cur, _, started in self.rows:  # row order: the reclaim's order
            if cur <= 0:
                continue
            if nostep and j.job_id in nostep:
                keep[j.job_id] = cur
            elif now - started < young_s:  # young: it keeps its GPUs if within its room
                if held_team is None:
                    held_team = Counter()
                    for _, r, _, _, held, _, _ in self.running_rows:
                        held_team[r.team] += held
                # within its team's entitlement as a whole, not what jobs before it in LAS
                # order took of it: else a job of its own team (one just requeued, say) would
                # preempt it at once, the thrash the protection is there to stop
                if self.young_kept or held_team[j.team] <= self.room.get(j.team, 0):
                    keep[j.job_id] = cur
                    if not now - started < reclaim_s:
                        reclaimable.append((j.job_id, j.team, lo, cur))
        return keep, reclaimable

    def _guarantee_left(self, keep: dict[str, int]) -> dict[str, int]:
        """Each team's guarantee less what its kept jobs hold: a team's guarantee counts its
        protected jobs first, so the floors spread only the rest over its other jobs (else a
        team keeps floors for unprotected jobs on top of its protected ones, and a team below
        its guarantee waits, or takes protected jobs, while they run)."""
        kept: Counter[str] = Counter()
        for _, j, _, _, _, _, _ in self.running_rows:
            if j.job_id in keep:
                kept[j.team] += keep[j.job_id]
        return {t: g - kept[t] for t, g in self.guarantee.items() if g > kept[t]}

    def _floors(self, g_room: dict[str, int], kept: dict[str, int] | None) -> dict[str, int]:
        """Each team's ``g_room`` (consumed) spread over its jobs not in ``kept`` nor late."""
        late = self.late
        floors: dict[str, int] = {}
        for _, j, lo, _, _, _, _ in self.rows:
            if (
                g_room.get(j.team, 0) >= lo
                and not (late and j.job_id in late)
                and not (kept and j.job_id in kept)
            ):
                floors[j.job_id] = lo
                g_room[j.team] -= lo
        for _, j, _, hi, _, _, _ in self.rows if floors and self.floor_growth else ():
            if j.job_id in floors and g_room.get(j.team, 0) > 0:
                add = min(hi - floors[j.job_id], g_room[j.team])
                floors[j.job_id] += add
                g_room[j.team] -= add
        return floors

    def _groups(self, floors: dict[str, int], keep: dict[str, int]) -> tuple[list[ElasticJob], ...]:
        """The groups, runs with no step yet apart, first (their floors always fit).

        Args:
            floors: each job's share of its team's guarantee.
            keep: the GPUs each running job keeps against other bulk jobs (see :meth:`_keep`;
                after a reclaim, what the reclaim leaves them).
        """
        now, late, nostep, touched, lost = self.now, self.late, self.nostep, self.touched, self.lost
        served = self.served
        room = dict(self.room)
        groups: tuple[list[ElasticJob], ...] = ([], [], [], [], [])
        nostep_g, kept_g, within, rest, late_g = groups
        # the job id from the row's key (it ends with it): this runs for every job every round
        for (_, _, job_id), j, lo, hi, cur, gpus, started in self.rows:
            floor = floors.get(job_id, 0) if floors else 0
            kept, no_step, urgent, lost_s = 0, False, False, 0.0
            attained = j.attained_service if served else 0.0
            if cur > 0:  # a running job's row (a queued one keeps, loses, hurries nothing)
                kept = keep.get(job_id, 0) if keep else 0
                no_step = bool(nostep) and job_id in nostep
                if no_step or (touched and job_id in touched):
                    hi = cur  # no step yet, or shrunk for an interactive job: no growth
                # its ``gpus`` is what it holds in the snapshot (``RunningJob.gpus``):
                # ``urgent`` and ``lost_s`` read it without isinstance or the property
                if lost and gpus:
                    ckpt = j.checkpoint_at  # type: ignore[union-attr]
                    since = now - (started if started > ckpt else ckpt)  # max(ckpt, started)
                    lost_s = gpus * (since if since > 0.0 else 0.0) / gpus  # lost_work(j) / gpus
                urgent = j.urgent  # type: ignore[union-attr]
                if served:
                    attained += gpus * (now - started)
            ej = ElasticJob(  # positional: this runs for every job every round
                job_id,
                lo,
                hi if hi >= lo else lo,
                gpus,
                cur,
                j.speedup,
                max(floor, kept) if kept else floor,
                now - started,
                urgent,
                lost_s,
                attained,
            )
            if kept:
                (nostep_g if no_step else kept_g).append(ej)
            elif late and job_id in late:
                late_g.append(ej)
            elif room.get(j.team, 0) >= lo:
                room[j.team] -= lo
                within.append(ej)
            else:
                rest.append(ej)
        return groups

    def _reclaim(
        self,
        keep: dict[str, int],
        reclaimable: Sequence[tuple[str, str, int, int]],
        bulk_pool: int,
    ) -> tuple[dict[str, int], dict[str, int]] | None:
        """Floors and kept GPUs after the teams below their guarantee reclaim; ``None``: as is.

        See the class docstring. Every team keeps at least its guarantee (or all it keeps, if
        less); a job is cut only as far as its team keeps more than that, and only if the cuts
        make the guarantees and what is kept fit in ``bulk_pool``.
        """
        kept: Counter[str] = Counter()
        for _, j, _, _, _, _, _ in self.running_rows:
            if j.job_id in keep:
                kept[j.team] += keep[j.job_id]
        guarantee = self.guarantee
        excess = {t: k - guarantee.get(t, 0) for t, k in kept.items() if k > guarantee.get(t, 0)}
        if not any(team in excess for _, team, _, _ in reclaimable):
            return None
        g_room = self._guarantee_left(keep)  # as in :meth:`jobs`
        over = sum(g_room.values()) + sum(keep.values()) - bulk_pool
        if over <= 0:  # even the whole guarantees fit (the floors spread no more)
            return None
        floors = self._floors(g_room, keep)
        over = sum(floors.values()) + sum(keep.values()) - bulk_pool
        if over <= 0:
            return None
        cut = dict(keep)
        for job_id, team, lo, gpus in reversed(reclaimable):
            spare = excess.get(team, 0)
            if spare <= 0:
                continue
            take = min(gpus, spare, over)
            if gpus - take >= lo:
                cut[job_id] = gpus - take
            elif gpus <= spare:  # all of it is borrowed: it keeps nothing
                del cut[job_id]
                take = gpus
            else:  # below its minimum it would take its team below its guarantee
                continue
            excess[team] = spare - take
            over -= take
            if over <= 0:
                return floors, cut
        return None  # the guarantees do not fit even so: admission order decides, as before
