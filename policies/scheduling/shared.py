"""The default policy: interactive now, deadline jobs EDF on their share, the rest for goodput."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import cast

from policies.decisions import Decision, DecisionKind
from policies.elastic import ELASTIC, ElasticAllocation, ElasticJob
from policies.elastic.search import SearchElastic
from policies.eligibility import capacity, off_kind, place, why_barred
from policies.placement import PLACEMENTS, Placement, without
from policies.placement.base import FreeIndex
from policies.preemption import PREEMPTIONS, Preemption, lost_work
from policies.queue.las import las_level
from policies.scheduling.base import SCHEDULING_POLICIES, SchedulingPolicy
from policies.scheduling.bulk import BulkAdmission, Row
from policies.scheduling.bulk_apply import apply_sizes
from policies.scheduling.churn import late_window
from policies.scheduling.deadlines import deadline_class
from policies.scheduling.kind_moves import kind_moves
from policies.scheduling.kind_plan import plan_round
from policies.scheduling.room import Room
from policies.scheduling.services import resize_services, services_to_resize
from policies.sharing import SHARINGS, TeamSharing
from policies.snapshot import INTERACTIVE, QueuedJob, RunningJob, Snapshot


@SCHEDULING_POLICIES.register("shared")
class SharedSchedulingPolicy(SchedulingPolicy):
    """Interactive jobs start at once; teams get their guarantee; the rest goes to goodput.

    One round:

    1. **Interactive first.** Services the SLA guard asks to run another number of replicas
       (``RunningJob.want_gpus``, issue 24) are resized first
       (:mod:`~policies.scheduling.services`: a grow makes room from bulk jobs as a start
       does); then queued interactive jobs, earliest start deadline first, start now.
       When free GPUs are short, bulk capacity gives way in this order: elastic jobs shrink
       towards their minimum (the job with most to spare first: fewest jobs disturbed), then
       whole bulk jobs are preempted, borrowed capacity (teams above their entitlement) before
       the rest, victims chosen by ``preemption`` (least work lost since a checkpoint, fewest
       jobs; the minimum-runtime protection only orders victims). In a pool of several GPU
       kinds, room is made on the kind the job is to start on, from the bulk jobs there
       (:class:`~policies.scheduling.room.Room` with a kind). An interactive job waits only
       when interactive jobs hold the whole pool, and then no bulk job gives way for it. Only
       here may a bulk run that has not done its first step yet lose GPUs.
    2. **Team entitlements.** ``sharing`` turns each team's demand (bulk ``max_gpus`` plus its
       interactive GPUs) into an entitlement: the guarantee, then a weighted fair share of the
       rest (idle guarantees are lent; an owner's new demand reclaims them).
    3. **Bulk for goodput.** Bulk jobs in discretised least-attained-service order (Tiresias
       levels: short jobs first without knowing sizes) are admitted by ``elastic``: each team's
       jobs first up to its entitlement (its guarantee is honoured before anything is lent),
       then everyone else at their minimum, then spare GPUs by an exact search over GPU counts
       for Pollux's objective on the jobs' speedup curves
       (:class:`~policies.elastic.SearchElastic`), a running job only resized when the gain
       pays for the restart and the work since its checkpoint. What
       running bulk jobs keep against other bulk jobs:

       * a run that has done no step yet (``RunningJob.first_step_at``) keeps exactly its GPUs,
         neither shrunk, preempted nor grown: any of these restarts it and throws its start-up
         away. This holds against a team's guarantee too: the reclaim waits for the first step
         (seconds live), which costs the owner little and the borrower its whole start-up;
       * a job younger than ``min_runtime_s`` whose team holds no more than its entitlement
         (``young_kept``: whatever its team holds) keeps its GPUs against fairness and
         goodput, but not against a team below its guarantee (reclaim; KAI's scheduler also
         separates the two): when the guarantees and what such jobs keep do not fit together,
         teams keeping more than their guarantee give the excess back at once, from their jobs
         last in admission order and not younger than ``reclaim_min_runtime_s`` (see
         :class:`~policies.scheduling.bulk.BulkAdmission`). A team's guarantee counts what
         these two kinds of jobs keep first: a team below its guarantee takes unprotected
         jobs, not these.

       **No bulk-for-bulk churn** (issue 28; :mod:`~policies.scheduling.churn`). A bulk job
       preempted less than the restart cost (``Snapshot.restart_cost_s``) ago is held: it
       waits, whatever is free (a run stopped and placed again within seconds pays two
       restarts for nothing; live, the stop is not even over). Then, until the longer of the
       restart cost and the round's interval has passed since its preemption (the previous
       round, with rounds longer than the restart cost), it is "late": left out of the round
       (its demand too: the other jobs' decisions are exactly those without it), then it gets
       GPUs no other job wants, after all of them: a preemption is never undone at once by
       preempting or shrinking another job. It has no guarantee floor then. And a preemption
       whose GPUs no start or grow of the round takes is not made (decided before the late
       jobs take what is left): it would only throw the victim's work away.

       **Deadlines: a class before fairness** (issue 26; :mod:`~policies.scheduling.deadlines`).
       Before the LAS rows above, the bulk jobs with a deadline and a known remaining work are
       admitted **earliest deadline first**, each on its **minimum satisfactory share** (the
       fewest GPUs that meet its deadline on its speedup curve, the restart and the work since
       its checkpoint counted for any change of size, with ``deadline_margin``) as its floor,
       while the shares fit the bulk pool (what runs with no step yet keep apart). A job whose
       share does not fit first displaces admitted jobs whose slack absorbs a stop (the most
       slack first), else it runs best effort, like a job no size can save (unless it has at
       most ``short_first_s`` of work left: then it keeps its place, due soonest, on its
       size), a late or held job, a run with no step yet, and a job without a deadline. A
       team's deadline jobs count against its entitlement and guarantee; guarantee floors
       protect minimums only (``guarantee_growth``), and growth (anything beyond a floor or a
       minimum) comes after every admission, so it never preempts nor reclaims. So best-effort
       jobs are the victims of deadline jobs, and deadline jobs are victims only as far as
       their slack absorbs it.
       Measured on the mixed benchmark with tight deadlines (bench/scheduler/README.md): 51.5%
       of deadlines met before, about 90% after (at most 90.6% can be met at all).

       **Kinds with counts** (issue 40; :mod:`~policies.scheduling.kind_plan`). In a pool of
       several GPU kinds the same objective chooses each bulk job's kind and count together,
       a kind's GPUs its own resource, the job's speed per kind (``speed_on``) scaling its
       curve, exactly, by a dynamic programme over the GPUs used per kind (Sia's 64-GPU
       clusters; a pool too large for it goes on as below). A running job planned on another
       kind moves there (a restart the penalty has weighed). Placing homogeneous counts kind
       by kind (fastest with room first, then ``kind_moves``) let the first jobs grow over the
       fast kind while the rest grew on the slow one: on Sia's job model and workloads mean JCT
       0.914 / 0.946 h (philly / saturn) before, against Sia's 0.658 / 0.739
       (bench/scheduler/sia/README.md).

    Decisions come in apply order: preemptions, shrinks, interactive starts, then bulk moves,
    grows and starts, then waits.

    Args:
        placement: placement policy (default ``topology``: fewest nodes per job).
        preemption: victim choice (default ``cost-aware``).
        sharing: team sharing (default ``drf``).
        elastic: elastic allocation (default ``search``,
            :class:`~policies.elastic.SearchElastic`: Pollux's objective, the harmonic mean
            of the jobs' speedups with a restart penalty that counts the work since the
            checkpoint, optimised by a dynamic program, or a price per GPU on large tables).
            Issue 26, part 4: on the Pollux workloads it is 0.877x / 0.922x the published
            Pollux mean JCT at loads 0.5 / 1.0, where ``goodput`` (greedy marginal goodput,
            running jobs keeping their GPUs first; the default before) was 1.20x / 1.21x;
            ``genetic`` (the same objective, searched by Pollux's genetic algorithm) costs
            9-18x ``goodput``'s decision time, ``search`` at most about 2x
            (bench/scheduler/README.md). Part 5: weighted by attained service (``search``).
        min_runtime_s: bulk jobs that started this recently are not preempted for other bulk
            (fairness or goodput). 120 s since issue 26 part 5 (300 s before): the longest
            with the Pollux workloads at or under 0.90x the published JCT (README, part 5).
        reclaim_min_runtime_s: bulk jobs that started this recently are not preempted for a
            team below its guarantee either (0: a guarantee is reclaimed at once; a value above
            ``min_runtime_s`` protects jobs younger than it against fairness and goodput too).
        las_first_gpu_s, las_factor: the LAS levels (see :func:`~policies.queue.las_level`).
            ``shared-genetic`` sets the first level to 8 GPU-hours (issue 16).
        fifo: order bulk jobs by submission instead of attained service.
        deadline_margin: the margin a deadline job's share must keep, as a fraction of its
            remaining run time (0.1: its share runs it in at most 1/1.1 of the time left).
        young_kept: jobs younger than ``min_runtime_s`` keep their GPUs against other bulk
            jobs whatever their team holds (a guarantee's reclaim still takes them). Off by
            default: measured on the mixed benchmark (BENCHMARKS.md, issue 28).
        running_first: within each LAS level, running jobs are admitted before queued ones in
            every round, so a queued job never preempts a running one of its own level.
        edf: the deadline class (``False``: deadlines are ignored, every job is best effort).
        guarantee_growth: a team's guarantee is spread as floors beyond its jobs' minimums, up
            to their ``hi`` (before issue 26; ``False``: minimums only).
        defer: a queued deadline job that could start a round later on its share and still
            meet its deadline runs best effort this round (it enters the class when it can
            wait no longer).
        plan: the admission plan's verdict binds (issue 26, ElasticFlow): a deadline job the
            plan declined (``Snapshot.declined``) runs best effort, never in the deadline
            class (``False``: the verdict is a forecast, the class admits every deadline job
            its share can save, round by round).
        short_first_s: a deadline job no size can save, with at most this many seconds of
            work left, keeps its place in the class (due soonest) on its size instead of
            running best effort (0: off). Without it, with tight deadlines, jobs of a minute or
            two waited behind the class for 39 minutes on average (issue 26, mixed benchmark:
            bulk mean JCT 7,198 s against 7,452 s, the same deadlines met; README).
        kind_plan: in a pool of several kinds, choose bulk jobs' kinds with their counts (see
            above; needs ``elastic="search"``). ``False``: counts as in one kind, placed on the
            fastest kind with room, then :func:`~policies.scheduling.kind_moves.kind_moves`.
    """

    def __init__(
        self,
        placement: Placement | str = "topology",
        preemption: Preemption | str = "cost-aware",
        sharing: TeamSharing | str = "drf",
        elastic: ElasticAllocation | str = "search",
        min_runtime_s: float = 120.0,
        reclaim_min_runtime_s: float = 0.0,
        las_first_gpu_s: float = 3600.0,
        las_factor: float = 4.0,
        fifo: bool = False,
        deadline_margin: float = 0.1,
        young_kept: bool = False,
        running_first: bool = False,
        edf: bool = True,
        guarantee_growth: bool = False,
        defer: bool = False,
        plan: bool = False,
        short_first_s: float = 300.0,
        kind_plan: bool = True,
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
        self.young_kept = young_kept
        self.running_first = running_first
        self.edf = edf
        self.guarantee_growth = guarantee_growth
        self.defer = defer
        self.binds_admission = plan
        self.short_first_s = short_first_s
        self.kind_plan = kind_plan and isinstance(self.elastic, SearchElastic)

    # ---- the round -------------------------------------------------------------------------

    def decide(self, snapshot: Snapshot) -> list[Decision]:
        """See :meth:`SchedulingPolicy.decide`. Four phases: the jobs read once
        (:func:`_read`), interactive jobs (:meth:`_interactive`), the bulk jobs' sizes
        (:meth:`_bulk`), then those sizes applied (:func:`~.bulk_apply.apply_sizes`)."""
        rnd = _read(snapshot)
        ent = self.sharing.entitlements(rnd.demand, snapshot.teams, snapshot.total_gpus)
        self._interactive(rnd, ent)
        queued, kept, sizes = self._bulk(rnd, ent)
        done = apply_sizes(
            sizes,
            queued,
            kept,
            rnd.late,
            rnd.hold,
            rnd.free,
            rnd.preempted,
            rnd.touched,
            self.placement,
            snapshot,
            rnd.kinds,
        )
        out = done.preempts + done.shrinks + rnd.starts + done.grows
        if rnd.kinds is not None:  # kinds chosen with the counts: moves among them
            return out + rnd.waits + done.waits
        # in a pool of several kinds: running jobs moved to a faster kind where it pays
        # (policies.scheduling.kind_moves), after every other decision of the round
        return out + kind_moves(snapshot, out, self.placement) + rnd.waits + done.waits

    def _interactive(self, rnd: _Round, ent: dict[str, int]) -> None:
        """Phase 1: services the SLA guard resizes, then queued interactive jobs start now,
        earliest start deadline first, bulk jobs making room (``rnd`` updated)."""
        snapshot, free, hold, inter_held = rnd.snapshot, rnd.free, rnd.hold, rnd.inter_held
        free_total = sum(free.values())
        inter = rnd.inter
        inter.sort(key=lambda q: (q.submitted_at + q.wait_target_s, q.seq, q.job_id))
        room = Room(
            self.preemption,
            snapshot,
            hold,
            free,
            ent,
            rnd.preempted,
            rnd.touched,
            inter_held,
            rnd.running_bulk,
        )
        services = services_to_resize(snapshot)
        if services:  # services first: they are measured at risk (or idle) now
            rnd.starts += resize_services(
                services, snapshot, hold, free, room, self.placement, inter_held
            )
            free_total = sum(free.values())
        for q in inter:
            # nodes without the memory, of a kind it may not use, or (several kinds) of
            # another kind than the one it is to start on
            small, there, kind = off_kind(snapshot, q, free, room)
            if there is None:  # one kind
                there = sum(without(free, small).values()) if small else free_total
            short = q.gpus - there
            # the room is made wherever bulk GPUs are (of the kind it is to start on, in a pool
            # of several): with nodes too small for the job, only when no bulk job is on those
            # and it can fit at all (never a preemption for nothing)
            if short > 0 and (
                room.may_make(q, snapshot.barred(q), kind)
                if kind is not None
                else not small or room.may_make(q, small)
            ):
                free_total += room.make(short, q.team, q.gpus, kind)
            fits = q.gpus <= free_total
            nodes = place(self.placement, q.gpus, free, snapshot, q) if fits else None
            if nodes is None:
                why = why_barred(snapshot, q) or "interactive jobs hold the pool"
                rnd.waits.append(Decision(DecisionKind.WAIT, q.job_id, reason=why))
                continue
            for n in nodes:
                free[n] -= 1
            free_total -= len(nodes)
            inter_held[q.team] += len(nodes)
            rnd.starts.append(
                Decision(
                    DecisionKind.START,
                    q.job_id,
                    nodes=nodes,
                    strategy=self.placement.ray_strategy,
                    reason="interactive: starts at once",
                )
            )

    def _bulk(
        self, rnd: _Round, ent: dict[str, int]
    ) -> tuple[list[tuple[QueuedJob, int, int]], list[_Running], dict[str, int]]:
        """Phases 2-3: the bulk jobs share what interactive jobs leave. Returns the queued
        bulk jobs that could ever fit, the running ones still running, and GPUs per job (a
        queued job too large for the pool waits: ``rnd.waits``)."""
        snapshot, total = rnd.snapshot, rnd.snapshot.total_gpus
        rnd.gone.update(rnd.preempted)
        bulk_pool = total - sum(rnd.inter_held.values())
        queued: list[tuple[QueuedJob, int, int]] = []
        for row in rnd.queued_bulk:
            # GPUs it could ever have: the pool, less the nodes too small for its memory
            most = capacity(snapshot, row[0])
            if row[2] <= most:
                queued.append(row)
            elif row[1] <= most:  # no more than its largest kind holds: a gang takes one kind
                queued.append((row[0], row[1], most))
            else:
                reason = f"needs {row[1]} GPUs; the pool has {total}"
                if most < total and (note := why_barred(snapshot, row[0])):
                    reason = f"needs {row[1]} GPUs; {note}"
                elif most < total:
                    reason = f"needs {row[1]} GPUs; the pool's largest kind has {most}"
                rnd.waits.append(Decision(DecisionKind.WAIT, row[0].job_id, reason=reason))
        gone = rnd.gone
        kept = (
            [row for row in rnd.running_bulk if row[0].job_id not in gone]
            if gone
            else rnd.running_bulk
        )
        if snapshot.mixed:  # a grow stays on the kind it runs on: no more than that kind holds
            kept = [
                (r, lo, min(hi, max(capacity(snapshot, r), gpus)), gpus) for r, lo, hi, gpus in kept
            ]
        sizes = self._bulk_sizes(rnd, queued, kept, ent, bulk_pool)
        return queued, kept, sizes

    # ---- helpers ---------------------------------------------------------------------------

    def _bulk_sizes(
        self,
        rnd: _Round,
        queued: Sequence[tuple[QueuedJob, int, int]],
        running: Sequence[_Running],
        ent: dict[str, int],
        bulk_pool: int,
    ) -> dict[str, int]:
        """GPUs per bulk job: the deadline class first (EDF, each on its share), then
        ``elastic`` over the rest in admission groups, LAS order in each.

        Args:
            rnd: the round so far (``hold``: GPUs each running job holds after the interactive
                jobs' shrinks; ``touched``: those shrunk, not regrown; ``late``: queued jobs
                preempted last round, which get what the others leave).
            queued: queued bulk jobs with their ``(lo, hi)``.
            running: running bulk jobs with their ``(lo, hi)`` and snapshot GPUs.
            ent: each team's entitlement.
            bulk_pool: GPUs for bulk jobs.
        """
        snapshot, inter_held = rnd.snapshot, rnd.inter_held
        rows, running_rows, dl, nostep = self._rows(rnd, queued, running)
        # the deadline class: admitted deadline jobs, EDF, each with its share as its floor
        fixed = sum(row[4] for row in running_rows if row[0][2] in nostep) if nostep else 0
        how = (self.deadline_margin, self.defer, self.short_first_s)
        dl_jobs, dl_held = deadline_class(dl, bulk_pool - fixed, snapshot, *how) if dl else ([], {})
        if dl_jobs:
            rows = [row for row in rows if row[1].job_id not in dl_held]
            running_rows = [row for row in running_rows if row[1].job_id not in dl_held]
        team_dl: Counter[str] = Counter()
        for team, share in dl_held.values():
            team_dl[team] += share
        admission = BulkAdmission(
            rows,
            running_rows,
            room={t: max(0, e - inter_held.get(t, 0) - team_dl[t]) for t, e in ent.items()},
            guarantee={
                t.name: max(0, t.guaranteed_gpus - inter_held.get(t.name, 0) - team_dl[t.name])
                for t in snapshot.teams
            },
            late=rnd.late,
            nostep=nostep,
            touched=rnd.touched,
            now=snapshot.now,
            min_runtime_s=self.min_runtime_s,
            reclaim_min_runtime_s=self.reclaim_min_runtime_s,
            lost=self.elastic.reads_lost,
            young_kept=self.young_kept,
            floor_growth=self.guarantee_growth,
            served=self.elastic.reads_served,
        )
        be_pool = bulk_pool - sum(team_dl.values())
        jobs, late_jobs = admission.jobs(be_pool)
        if dl_jobs:
            jobs = dl_jobs + jobs
        if self.kind_plan and snapshot.mixed:
            planned = self._kind_sizes(rnd, queued, running, jobs, late_jobs)
            if planned is not None:
                return planned
        sizes = self.elastic.allocate(jobs, bulk_pool, snapshot.restart_cost_s)
        if late_jobs:  # preempted recently: the GPUs the others leave
            left = bulk_pool - sum(sizes.values())
            sizes.update(self.elastic.allocate(late_jobs, left, snapshot.restart_cost_s))
        return sizes

    def _kind_sizes(
        self,
        rnd: _Round,
        queued: Sequence[tuple[QueuedJob, int, int]],
        running: Sequence[_Running],
        jobs: list[ElasticJob],
        late_jobs: list[ElasticJob],
    ) -> dict[str, int] | None:
        """GPUs per bulk job in a pool of several kinds, each job's kind chosen with its count
        (:func:`~policies.scheduling.kind_plan.plan_round`, kinds kept in ``rnd.kinds``);
        ``None``: too large a programme for this round."""
        of: dict[str, QueuedJob | RunningJob] = {q.job_id: q for q, _, _ in queued}
        of.update((r.job_id, r) for r, _, _, _ in running)
        search = cast(SearchElastic, self.elastic)
        plan = plan_round(
            rnd.snapshot, rnd.free, rnd.hold, of, jobs, late_jobs, search, rnd.touched
        )
        if plan is None:
            return None
        sizes, rnd.kinds = plan
        return sizes

    def _rows(
        self,
        rnd: _Round,
        queued: Sequence[tuple[QueuedJob, int, int]],
        running: Sequence[_Running],
    ) -> tuple[list[Row], list[Row], list[_Deadline], set[str]]:
        """The bulk jobs as admission rows, in LAS order (all, and the running ones apart),
        the deadline jobs that may change size this round, and the runs with no step yet."""
        snapshot, late, hold, touched = rnd.snapshot, rnd.late, rnd.hold, rnd.touched
        now = snapshot.now
        first, factor, fifo, level_of = self.las_first_gpu_s, self.las_factor, self.fifo, las_level
        # (LAS key, job, lo, hi, GPUs held now, GPUs asked, start), one per job; the key is
        # Tiresias's level of attained service (the current run's included), then submission
        rows: list[Row] = []
        dl: list[_Deadline] = []
        edf = self.edf
        # a declined job (the plan's verdict binding) is best effort, as a late one this round
        declined = snapshot.declined if self.binds_admission else frozenset()
        out = late | declined if declined else late
        for q, lo, hi in queued:
            served = q.attained_service
            level = 0 if fifo or served < first else level_of(served, first, factor)
            rows.append(((level, q.seq, q.job_id), q, lo, hi, 0, q.gpus, now))
            if edf and q.deadline is not None and not (out and q.job_id in out):
                dl.append((q, lo, hi, 0, 0.0))
        running_rows: list[Row] = []
        nostep: set[str] = set()
        for r, lo, hi, gpus in running:
            job_id, started = r.job_id, r.started_at
            run = now - started
            served = r.attained_service + gpus * (run if run > 0.0 else 0.0)
            level = 0 if fifo or served < first else level_of(served, first, factor)
            # the GPUs it holds now: its own unless an interactive job made it shrink
            shrunk = touched and job_id in touched
            cur = len(hold[job_id]) if shrunk else gpus
            running_rows.append(((level, r.seq, job_id), r, lo, hi, cur, gpus, started))
            stepped = r.stepped(now)
            if not stepped:
                nostep.add(job_id)
            # one that may not change size this round (no step yet, or shrunk for an
            # interactive job) keeps what it holds: it is not in the class this round
            if (
                edf
                and r.deadline is not None
                and stepped
                and not shrunk
                and not (declined and job_id in declined)
            ):
                dl.append((r, lo, hi, cur, lost_work(r, now) / gpus if gpus else 0.0))
        rows += running_rows
        if self.running_first:  # within a LAS level, running jobs before queued ones
            rows.sort(key=lambda row: (row[0][0], not row[4], row[0]))
        else:
            rows.sort(key=itemgetter(0))
        return rows, running_rows, dl, nostep


_Running = tuple[RunningJob, int, int, int]
"""A running bulk job with its ``lo``, ``hi`` and ``gpus``, read once per round."""
_Deadline = tuple[QueuedJob | RunningJob, int, int, int, float]
"""A bulk job with a deadline that may change size this round, for the deadline class: the job,
its ``lo``, ``hi``, GPUs held and seconds of work a change throws away."""


@dataclass(slots=True)
class _Round:
    """What a round of ``shared`` has read and decided so far, passed from phase to phase."""

    snapshot: Snapshot
    free: dict[str, int]
    # GPUs each running job holds; a job's tuple becomes a list when it loses GPUs
    hold: dict[str, Sequence[str]]
    demand: dict[str, int]  # each team's demand, for its entitlement
    inter: list[QueuedJob]  # queued interactive jobs
    queued_bulk: list[tuple[QueuedJob, int, int]]  # with their (lo, hi)
    late: set[str]  # queued bulk jobs preempted since the last round
    inter_held: Counter[str]  # GPUs each team's interactive jobs hold (new ones included)
    running_bulk: list[_Running]
    waits: list[Decision]
    starts: list[Decision] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    gone: set[str] = field(default_factory=set)  # the same jobs as ``preempted``, for lookups
    touched: set[str] = field(default_factory=set)  # shrunk for an interactive job: no regrowth
    kinds: dict[str, str] | None = None  # bulk jobs' kinds, where chosen with their counts


def _read(snapshot: Snapshot) -> _Round:
    """One pass over the jobs (this runs for every job every round): each team's demand,
    interactive jobs apart, bulk jobs with their (lo, hi); a bulk job preempted within the
    restart cost is held (not placed at all: it waits), one preempted since the last round is
    "late": the round goes as if it were not there, then it gets what is left."""
    free = snapshot.free()
    if snapshot.mixed:  # each kind's free GPUs kept as they change (policies.eligibility)
        free = FreeIndex(free, snapshot.kind_map)
    hold: dict[str, Sequence[str]] = {r.job_id: r.nodes for r in snapshot.running}
    waits: list[Decision] = []
    demand: dict[str, int] = {}
    inter: list[QueuedJob] = []
    queued_bulk: list[tuple[QueuedJob, int, int]] = []
    late: set[str] = set()
    now, restart = snapshot.now, snapshot.restart_cost_s
    late_s = late_window(snapshot)
    for q in snapshot.queue:
        if q.job_class == INTERACTIVE:  # q.interactive, without the property call
            inter.append(q)
            demand[q.team] = demand.get(q.team, 0) + q.gpus
            continue
        at = q.preempted_at
        if at is not None and late_s and now - at <= late_s:
            if now - at < restart:
                why = f"preempted {now - at:.0f} s ago: held for the restart cost"
                waits.append(Decision(DecisionKind.WAIT, q.job_id, reason=why))
                continue
            late.add(q.job_id)
        lo, hi = _bounds(q, q.gpus)
        queued_bulk.append((q, lo, hi))
        if not (late and q.job_id in late):
            demand[q.team] = demand.get(q.team, 0) + hi
    inter_held: Counter[str] = Counter()
    running_bulk: list[_Running] = []
    for r in snapshot.running:
        gpus = len(r.nodes)
        if r.job_class == INTERACTIVE:  # r.interactive, without the property call
            inter_held[r.team] += gpus
            demand[r.team] = demand.get(r.team, 0) + max(gpus, r.want_gpus)
        else:
            lo, hi = _bounds(r, gpus)
            running_bulk.append((r, lo, hi, gpus))
            demand[r.team] = demand.get(r.team, 0) + (hi if hi > gpus else gpus)
    return _Round(
        snapshot, free, hold, demand, inter, queued_bulk, late, inter_held, running_bulk, waits
    )


def _bounds(job: QueuedJob | RunningJob, gpus: int) -> tuple[int, int]:
    """``(job.lo, job.hi)`` of a job on ``gpus`` GPUs: the snapshot's rule, inlined (fast)."""
    lo = job.min_gpus or gpus
    hi = job.max_gpus or gpus
    return lo, hi if hi > lo else lo
