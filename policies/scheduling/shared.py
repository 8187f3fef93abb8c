"""The default combined policy: interactive now, team guarantees, the rest shared for goodput."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from operator import itemgetter

from policies.decisions import Decision, DecisionKind
from policies.elastic import ELASTIC, ElasticAllocation
from policies.gpu_memory import capacity, memory_note, usable
from policies.placement import PLACEMENTS, Placement, without
from policies.preemption import PREEMPTIONS, Preemption
from policies.queue.las import las_level
from policies.scheduling.base import SCHEDULING_POLICIES, SchedulingPolicy
from policies.scheduling.bulk import BulkAdmission, Row
from policies.scheduling.deadlines import at_risk
from policies.scheduling.resize import drop_gpus, grow_gpus
from policies.scheduling.room import Room
from policies.sharing import SHARINGS, TeamSharing
from policies.snapshot import INTERACTIVE, QueuedJob, RunningJob, Snapshot


@SCHEDULING_POLICIES.register("shared")
class SharedSchedulingPolicy(SchedulingPolicy):
    """Interactive jobs start at once; teams get their guarantee; the rest goes to goodput.

    One round:

    1. **Interactive first.** Queued interactive jobs, earliest start deadline first, start now.
       When free GPUs are short, bulk capacity gives way in this order: elastic jobs shrink
       towards their minimum (the job with most to spare first: fewest jobs disturbed), then
       whole bulk jobs are preempted, borrowed capacity (teams above their entitlement) before
       the rest, victims chosen by ``preemption`` (least work lost since a checkpoint, fewest
       jobs; the minimum-runtime protection only orders victims). An interactive job waits only
       when interactive jobs hold the whole pool, and then no bulk job gives way for it. Only
       here may a bulk run that has not done its first step yet lose GPUs.
    2. **Team entitlements.** ``sharing`` turns each team's demand (bulk ``max_gpus`` plus its
       interactive GPUs) into an entitlement: the guarantee, then a weighted fair share of the
       rest (idle guarantees are lent; an owner's new demand reclaims them).
    3. **Bulk for goodput.** Bulk jobs in discretised least-attained-service order (Tiresias
       levels: short jobs first without knowing sizes) are admitted by ``elastic``: each team's
       jobs first up to its entitlement (its guarantee is honoured before anything is lent),
       then everyone else at their minimum, then spare GPUs by marginal goodput from the jobs'
       speedup curves, a running job only resized when the gain pays for the restart. What
       running bulk jobs keep against other bulk jobs:

       * a run that has done no step yet (``RunningJob.first_step_at``) keeps exactly its GPUs,
         neither shrunk, preempted nor grown: any of these restarts it and throws its start-up
         away. This holds against a team's guarantee too: the reclaim waits for the first step
         (seconds live), which costs the owner little and the borrower its whole start-up;
       * a job younger than ``min_runtime_s`` whose team holds no more than its entitlement
         keeps its GPUs against fairness and goodput, but not against a team below its
         guarantee (reclaim; KAI's scheduler also separates the two): when the guarantees and
         what such jobs keep do not fit together, teams keeping more than their guarantee give
         the excess back at once, from their jobs last in admission order and not younger
         than ``reclaim_min_runtime_s`` (see :class:`~policies.scheduling.bulk.BulkAdmission`).

       A bulk job preempted in the previous round (``QueuedJob.preempted_at`` within
       ``Snapshot.interval_s``) is left out of the round (its demand too: the other jobs'
       decisions are exactly those without it), then gets GPUs no other job wants, after all
       of them: a preemption is never undone at once by preempting or shrinking another job.
       It has no guarantee floor that round.

       **Deadlines at risk.** A bulk job whose remaining work, at its current (or asked)
       size, will miss its deadline or meet it by less than ``deadline_margin`` of its run
       time is at risk (see :mod:`~policies.scheduling.deadlines`; one that cannot meet it
       even on its ``max_gpus`` is not: it is scheduled as if it had no deadline, as is a
       job on time). In a round with jobs at risk, admission order within each LAS level is:
       running jobs, then at-risk queued jobs, least slack first, then the other queued jobs.
       So an at-risk job gets GPUs first from its team's entitlement and guarantee floors
       (both go in this order), beyond the entitlement it borrows only as borrowers do (after
       every team's jobs within their entitlement: never by preempting another team within
       it), and the running jobs of its level are not preempted for queued ones (a preemption
       loses the work since the last checkpoint plus a restart: the time deadlines are short
       of). It does not jump LAS levels and gets no floor of its own: on the Philly mix, both
       met fewer deadlines than LAS alone (BENCHMARKS.md). With no job at risk the round is
       exactly as without deadlines; the added work is one check per job with a deadline.

    Decisions come in apply order: preemptions, shrinks, interactive starts, then bulk grows
    and starts, then waits.

    Args:
        placement: placement policy (default ``topology``: fewest nodes per job).
        preemption: victim choice (default ``cost-aware``).
        sharing: team sharing (default ``drf``).
        elastic: elastic allocation (default ``goodput`` with the ``log`` objective).
            ``"genetic"`` (:class:`~policies.elastic.GeneticElastic`) spreads the bulk GPUs
            left after admission by the Pollux genetic search, without Pollux's ramp: on the
            Pollux workloads it is 0.875x/0.928x the published Pollux mean JCT at loads
            0.5/1.0 (``goodput``: 1.20x/1.21x), but on the mixed benchmark its bulk mean JCT
            is 11% worse and it meets fewer deadlines, so it is not the default (issue 16).
        min_runtime_s: bulk jobs that started this recently are not preempted for other bulk
            (fairness or goodput).
        reclaim_min_runtime_s: bulk jobs that started this recently are not preempted for a
            team below its guarantee either (0: a guarantee is reclaimed at once; a value above
            ``min_runtime_s`` protects jobs younger than it against fairness and goodput too).
        las_first_gpu_s, las_factor: the LAS levels (see :func:`~policies.queue.las_level`).
            ``shared-genetic`` sets the first level to 8 GPU-hours (issue 16).
        fifo: order bulk jobs by submission instead of attained service.
        deadline_margin: the margin a deadline job's prediction must keep, as a fraction of
            its remaining run time (0.1: a job due in under 1.1x its remaining time, start-up
            and next round counted, is at risk).
    """

    def __init__(
        self,
        placement: Placement | str = "topology",
        preemption: Preemption | str = "cost-aware",
        sharing: TeamSharing | str = "drf",
        elastic: ElasticAllocation | str = "goodput",
        min_runtime_s: float = 300.0,
        reclaim_min_runtime_s: float = 0.0,
        las_first_gpu_s: float = 3600.0,
        las_factor: float = 4.0,
        fifo: bool = False,
        deadline_margin: float = 0.1,
    ) -> None:
        self.placement = PLACEMENTS.create(placement) if isinstance(placement, str) else placement
        self.preemption = (
            PREEMPTIONS.create(preemption, min_runtime_s=min_runtime_s)
            if isinstance(preemption, str)
            else preemption
        )
        self.sharing = SHARINGS.create(sharing) if isinstance(sharing, str) else sharing
        self.elastic = ELASTIC.create(elastic) if isinstance(elastic, str) else elastic
        self.min_runtime_s = min_runtime_s
        self.reclaim_min_runtime_s = reclaim_min_runtime_s
        self.las_first_gpu_s = las_first_gpu_s
        self.las_factor = las_factor
        self.fifo = fifo
        self.deadline_margin = deadline_margin

    # ---- the round -------------------------------------------------------------------------

    def decide(self, snapshot: Snapshot) -> list[Decision]:
        """See :meth:`SchedulingPolicy.decide`."""
        total = snapshot.total_gpus
        free = snapshot.free()
        free_total = sum(free.values())
        # GPUs each running job holds; a job's tuple becomes a list when it loses GPUs
        hold: dict[str, Sequence[str]] = {r.job_id: r.nodes for r in snapshot.running}
        preempted: list[str] = []
        gone: set[str] = set()  # the same jobs as ``preempted``, for lookups
        touched: set[str] = set()  # shrunk this round for an interactive job: no regrowth
        starts: list[Decision] = []
        waits: list[Decision] = []

        # one pass over the jobs (this runs for every job every round): each team's demand,
        # interactive jobs apart, bulk jobs with their (lo, hi); a bulk job preempted last
        # round is "late": the round goes as if it were not there, then it gets what is left
        demand: dict[str, int] = {}
        inter: list[QueuedJob] = []
        queued_bulk: list[tuple[QueuedJob, int, int]] = []
        late: set[str] = set()
        now, interval = snapshot.now, snapshot.interval_s
        for q in snapshot.queue:
            if q.interactive:
                inter.append(q)
                demand[q.team] = demand.get(q.team, 0) + q.gpus
            else:
                lo, hi = _bounds(q, q.gpus)
                queued_bulk.append((q, lo, hi))
                if q.preempted_at is not None and q.just_preempted(now, interval):
                    late.add(q.job_id)
                else:
                    demand[q.team] = demand.get(q.team, 0) + hi
        inter_held: Counter[str] = Counter()
        running_bulk: list[_Running] = []
        for r in snapshot.running:
            gpus = len(r.nodes)
            if r.job_class == INTERACTIVE:  # r.interactive, without the property call
                inter_held[r.team] += gpus
                demand[r.team] = demand.get(r.team, 0) + gpus
            else:
                lo, hi = _bounds(r, gpus)
                running_bulk.append((r, lo, hi, gpus))
                demand[r.team] = demand.get(r.team, 0) + (hi if hi > gpus else gpus)
        ent = self.sharing.entitlements(demand, snapshot.teams, total)

        # 1. interactive jobs start now
        inter.sort(key=lambda q: (q.submitted_at + q.wait_target_s, q.seq, q.job_id))
        room = Room(self.preemption, snapshot, hold, free, ent, preempted, touched, inter_held)
        for q in inter:
            small = snapshot.too_small(q.gpu_memory_gb)  # nodes without the memory it needs
            mine = without(free, small)
            short = q.gpus - (sum(mine.values()) if small else free_total)
            # the room is made wherever bulk GPUs are: with nodes too small for the job, only
            # when no bulk job is on those and it can fit at all (never a preemption for nothing)
            if short > 0 and (not small or _may_make_room(q, small, hold, snapshot)):
                free_total += room.make(short, q.team, q.gpus)
                mine = without(free, small)
            nodes = self.placement.place(q.gpus, mine) if q.gpus <= free_total else None
            if nodes is None:
                why = memory_note(snapshot, q) if small else "interactive jobs hold the pool"
                waits.append(Decision(DecisionKind.WAIT, q.job_id, reason=why))
                continue
            for n in nodes:
                free[n] -= 1
            free_total -= len(nodes)
            inter_held[q.team] += len(nodes)
            starts.append(
                Decision(
                    DecisionKind.START,
                    q.job_id,
                    nodes=nodes,
                    strategy=self.placement.ray_strategy,
                    reason="interactive: starts at once",
                )
            )

        # 2-3. bulk jobs share what interactive jobs leave
        gone.update(preempted)
        bulk_pool = total - sum(inter_held.values())
        queued: list[tuple[QueuedJob, int, int]] = []
        for row in queued_bulk:
            # GPUs it could ever have: the pool, less the nodes too small for its memory
            most = total if row[0].gpu_memory_gb is None else capacity(snapshot, row[0])
            if row[1] <= most:
                queued.append(row)
            else:
                reason = f"needs {row[1]} GPUs; the pool has {total}"
                if most < total:
                    reason = f"needs {row[1]} GPUs; {memory_note(snapshot, row[0])}"
                waits.append(Decision(DecisionKind.WAIT, row[0].job_id, reason=reason))
        kept = [row for row in running_bulk if row[0].job_id not in gone] if gone else running_bulk
        sizes = self._bulk_sizes(
            queued, late, kept, hold, ent, inter_held, bulk_pool, touched, snapshot
        )

        shrinks: list[Decision] = []
        grows: list[Decision] = []
        for job_id in preempted:
            for n in hold.pop(job_id):
                free[n] += 1
        # bulk shrinks and preemptions release first; the jobs to grow or start are noted
        growing: list[QueuedJob | RunningJob] = [
            q for q, _, _ in queued if sizes.get(q.job_id, 0) > 0
        ]
        for r, _, _, _ in kept:
            target = sizes.get(r.job_id, 0)
            holds = len(hold[r.job_id])
            if target == 0:
                preempted.append(r.job_id)
                gone.add(r.job_id)
                for n in hold.pop(r.job_id):
                    free[n] += 1
            elif target < holds:
                smaller = hold[r.job_id] = list(hold[r.job_id])
                for n in drop_gpus(smaller, holds - target):
                    free[n] += 1
                touched.add(r.job_id)
            elif target > holds:
                growing.append(r)
        for r in snapshot.running if touched else ():
            if r.job_id in touched and r.job_id in hold:
                shrinks.append(
                    Decision(
                        DecisionKind.RESIZE,
                        r.job_id,
                        nodes=tuple(hold[r.job_id]),
                        strategy=self.placement.ray_strategy,
                        reason=f"shrinks to {len(hold[r.job_id])} GPUs",
                    )
                )
        # grows and starts, largest first (placement quality), then priority order; jobs
        # preempted last round last (they take only what the others leave)
        growing.sort(key=lambda j: (j.job_id in late, -sizes[j.job_id]))
        for j in growing:
            have = hold.get(j.job_id, ())
            extra = sizes[j.job_id] - len(have)
            if isinstance(j, RunningJob):
                small = snapshot.too_small(j.gpu_memory_gb)
                added = grow_gpus(have, extra, free, self.placement, small)
                if added is None:
                    continue
                grows.append(
                    Decision(
                        DecisionKind.RESIZE,
                        j.job_id,
                        nodes=(*have, *added),
                        strategy=self.placement.ray_strategy,
                        reason=f"grows to {sizes[j.job_id]} GPUs for goodput",
                    )
                )
            else:
                nodes = self.placement.place(extra, usable(free, snapshot, j))
                if nodes is None:
                    continue
                for n in nodes:
                    free[n] -= 1
                grows.append(
                    Decision(
                        DecisionKind.START,
                        j.job_id,
                        nodes=nodes,
                        strategy=self.placement.ray_strategy,
                        reason=f"bulk on {extra} GPUs",
                    )
                )
        started = {d.job_id for d in grows}
        for q, _, _ in queued:
            if q.job_id not in started:
                reason = (
                    "preempted last round: takes only GPUs no other job wants"
                    if q.job_id in late
                    else "waiting for GPUs"
                )
                note = memory_note(snapshot, q) if q.gpu_memory_gb is not None else ""
                reason = f"{reason}; {note}" if note else reason
                waits.append(Decision(DecisionKind.WAIT, q.job_id, reason=reason))
        preempts = [
            Decision(DecisionKind.PREEMPT, job_id, reason="gives way") for job_id in preempted
        ]
        return preempts + shrinks + starts + grows + waits

    # ---- helpers ---------------------------------------------------------------------------

    def _bulk_sizes(
        self,
        queued: Sequence[tuple[QueuedJob, int, int]],
        late: set[str],
        running: Sequence[_Running],
        hold: dict[str, Sequence[str]],
        ent: dict[str, int],
        inter_held: Counter[str],
        bulk_pool: int,
        touched: set[str],
        snapshot: Snapshot,
    ) -> dict[str, int]:
        """GPUs per bulk job: ``elastic`` over the jobs in admission groups, LAS order in each.

        Args:
            queued: queued bulk jobs with their ``(lo, hi)``.
            late: the queued jobs preempted last round: they get what the others leave.
            running: running bulk jobs with their ``(lo, hi)`` and snapshot GPUs.
            hold: GPUs each running job holds now (after the interactive jobs' shrinks).
            ent: each team's entitlement.
            inter_held: GPUs each team's interactive jobs hold (new ones included).
            bulk_pool: GPUs for bulk jobs.
            touched: running jobs shrunk this round (not regrown).
            snapshot: the round's snapshot.
        """
        now = snapshot.now
        first, factor, fifo, level_of = self.las_first_gpu_s, self.las_factor, self.fifo, las_level
        # (LAS key, job, lo, hi, GPUs held now, GPUs asked, start), one per job; the key is
        # Tiresias's level of attained service (the current run's included), then submission
        rows: list[Row] = []
        # bulk jobs with a deadline, (job, lo, hi this round, GPUs held), for the at-risk check
        dl: list[tuple[QueuedJob | RunningJob, int, int, int]] = []
        for q, lo, hi in queued:
            served = q.attained_service
            level = 0 if fifo or served < first else level_of(served, first, factor)
            rows.append(((level, q.seq, q.job_id), q, lo, hi, 0, q.gpus, now))
            if q.deadline is not None and not (late and q.job_id in late):
                dl.append((q, lo, hi, 0))
        running_rows: list[Row] = []
        nostep: set[str] = set()
        for r, lo, hi, gpus in running:
            run = now - r.started_at
            served = r.attained_service + gpus * (run if run > 0.0 else 0.0)
            level = 0 if fifo or served < first else level_of(served, first, factor)
            # the GPUs it holds now: its own unless an interactive job made it shrink
            cur = len(hold[r.job_id]) if touched and r.job_id in touched else gpus
            running_rows.append(((level, r.seq, r.job_id), r, lo, hi, cur, gpus, r.started_at))
            stepped = r.stepped(now)
            if not stepped:
                nostep.add(r.job_id)
            if r.deadline is not None:  # no growth when it may not grow this round
                fixed = not stepped or (touched and r.job_id in touched)
                dl.append((r, lo, cur if fixed else hi, cur))
        rows += running_rows
        rows.sort(key=itemgetter(0))
        risk = (
            at_risk(dl, now, snapshot.restart_cost_s, snapshot.interval_s, self.deadline_margin)
            if dl
            else []
        )
        if risk:  # per LAS level: running jobs, at-risk queued jobs (least slack), the rest
            pos = {a.job_id: i for i, a in enumerate(risk)}
            n = len(risk)
            rows.sort(key=lambda row: (row[0][0], -1 if row[4] else pos.get(row[1].job_id, n)))
        admission = BulkAdmission(
            rows,
            running_rows,
            room={t: max(0, e - inter_held.get(t, 0)) for t, e in ent.items()},
            guarantee={
                t.name: max(0, t.guaranteed_gpus - inter_held.get(t.name, 0))
                for t in snapshot.teams
            },
            late=late,
            nostep=nostep,
            touched=touched,
            now=now,
            min_runtime_s=self.min_runtime_s,
            reclaim_min_runtime_s=self.reclaim_min_runtime_s,
            lost=self.elastic.reads_lost,
        )
        jobs, late_jobs = admission.jobs(bulk_pool)
        sizes = self.elastic.allocate(jobs, bulk_pool, snapshot.restart_cost_s)
        if late_jobs:  # preempted last round: the GPUs the others leave
            left = bulk_pool - sum(sizes.values())
            sizes.update(self.elastic.allocate(late_jobs, left, snapshot.restart_cost_s))
        return sizes


_Running = tuple[RunningJob, int, int, int]
"""A running bulk job with its ``lo``, ``hi`` and ``gpus``, read once per round."""


def _may_make_room(
    job: QueuedJob, small: frozenset[str], hold: dict[str, Sequence[str]], snapshot: Snapshot
) -> bool:
    """Whether bulk GPUs may be freed for an interactive ``job`` that ``small`` nodes are too
    small for: only when it fits the other nodes at all and no bulk job holds a GPU on
    ``small`` (``Room`` frees GPUs wherever bulk jobs hold them)."""
    if job.gpus > capacity(snapshot, job):
        return False
    return not any(
        not r.interactive and any(n in small for n in hold.get(r.job_id, ()))
        for r in snapshot.running
    )


def _bounds(job: QueuedJob | RunningJob, gpus: int) -> tuple[int, int]:
    """``(job.lo, job.hi)`` of a job on ``gpus`` GPUs: the snapshot's rule, inlined (fast)."""
    lo = job.min_gpus or gpus
    hi = job.max_gpus or gpus
    return lo, hi if hi > lo else lo
