"""The default combined policy: interactive now, team guarantees, the rest shared for goodput."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from policies.decisions import Decision, DecisionKind
from policies.elastic import ELASTIC, ElasticAllocation, ElasticJob
from policies.placement import PLACEMENTS, Placement
from policies.preemption import PREEMPTIONS, Preemption
from policies.queue.las import las_level
from policies.scheduling.base import SCHEDULING_POLICIES, SchedulingPolicy
from policies.scheduling.resize import drop_gpus, grow_gpus
from policies.scheduling.tiresias import service
from policies.sharing import SHARINGS, TeamSharing
from policies.snapshot import QueuedJob, RunningJob, Snapshot, TeamView


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
       when interactive jobs hold the whole pool.
    2. **Team entitlements.** ``sharing`` turns each team's demand (bulk ``max_gpus`` plus its
       interactive GPUs) into an entitlement: the guarantee, then a weighted fair share of the
       rest (idle guarantees are lent; an owner's new demand reclaims them).
    3. **Bulk for goodput.** Bulk jobs in discretised least-attained-service order (Tiresias
       levels: short jobs first without knowing sizes) are admitted by ``elastic``: each team's
       jobs first up to its entitlement (its guarantee is honoured before anything is lent),
       then everyone else at their minimum, then spare GPUs by marginal goodput from the jobs'
       speedup curves, a running job only resized when the gain pays for the restart. Running
       jobs younger than ``min_runtime_s`` and within their team's entitlement keep their GPUs.

    Decisions come in apply order: preemptions, shrinks, interactive starts, then bulk grows
    and starts, then waits.

    Args:
        placement: placement policy (default ``topology``: fewest nodes per job).
        preemption: victim choice (default ``cost-aware``).
        sharing: team sharing (default ``drf``).
        elastic: elastic allocation (default ``goodput`` with the ``log`` objective).
        min_runtime_s: bulk jobs that started this recently are not preempted for other bulk.
        las_first_gpu_s, las_factor: the LAS levels (see :func:`~policies.queue.las_level`).
        fifo: order bulk jobs by submission instead of attained service.
    """

    def __init__(
        self,
        placement: Placement | str = "topology",
        preemption: Preemption | str = "cost-aware",
        sharing: TeamSharing | str = "drf",
        elastic: ElasticAllocation | str = "goodput",
        min_runtime_s: float = 300.0,
        las_first_gpu_s: float = 3600.0,
        las_factor: float = 4.0,
        fifo: bool = False,
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
        self.las_first_gpu_s = las_first_gpu_s
        self.las_factor = las_factor
        self.fifo = fifo

    # ---- the round -------------------------------------------------------------------------

    def decide(self, snapshot: Snapshot) -> list[Decision]:
        """See :meth:`SchedulingPolicy.decide`."""
        now = snapshot.now
        free = snapshot.free()
        running = {r.job_id: r for r in snapshot.running}
        hold = {r.job_id: list(r.nodes) for r in snapshot.running}
        preempted: list[str] = []
        touched: set[str] = set()  # shrunk this round for an interactive job: no regrowth
        starts: list[Decision] = []
        waits: list[Decision] = []

        demand: Counter[str] = Counter()
        for q in snapshot.queue:
            demand[q.team] += q.gpus if q.interactive else q.hi
        for r in snapshot.running:
            demand[r.team] += r.gpus if r.interactive else max(r.hi, r.gpus)
        ent = self.sharing.entitlements(dict(demand), snapshot.teams, snapshot.total_gpus)

        # 1. interactive jobs start now
        inter = sorted(
            (q for q in snapshot.queue if q.interactive),
            key=lambda q: (q.submitted_at + q.wait_target_s, q.seq, q.job_id),
        )
        for q in inter:
            short = q.gpus - sum(free.values())
            if short > 0:
                self._make_room(
                    short, running, hold, free, ent, snapshot.teams, now, preempted, touched
                )
            nodes = self.placement.place(q.gpus, free) if q.gpus <= sum(free.values()) else None
            if nodes is None:
                waits.append(
                    Decision(DecisionKind.WAIT, q.job_id, reason="interactive jobs hold the pool")
                )
                continue
            for n in nodes:
                free[n] -= 1
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
        inter_held: Counter[str] = Counter()
        for r in snapshot.running:
            if r.interactive:
                inter_held[r.team] += r.gpus
        for d in starts:
            inter_held[next(q.team for q in inter if q.job_id == d.job_id)] += len(d.nodes)
        bulk_pool = snapshot.total_gpus - sum(inter_held.values())
        bulk: list[QueuedJob | RunningJob] = [
            q for q in snapshot.queue if not q.interactive and q.lo <= snapshot.total_gpus
        ]
        bulk += [r for r in snapshot.running if not r.interactive and r.job_id not in preempted]
        for q in snapshot.queue:
            if not q.interactive and q.lo > snapshot.total_gpus:
                waits.append(
                    Decision(
                        DecisionKind.WAIT,
                        q.job_id,
                        reason=f"needs {q.lo} GPUs; the pool has {snapshot.total_gpus}",
                    )
                )
        sizes = self._bulk_sizes(bulk, hold, ent, inter_held, bulk_pool, touched, snapshot)

        shrinks: list[Decision] = []
        grows: list[Decision] = []
        for job_id in preempted:
            for n in hold.pop(job_id):
                free[n] += 1
        for r in snapshot.running:  # bulk shrinks and preemptions release first
            if r.interactive or r.job_id in preempted:
                continue
            target = sizes.get(r.job_id, 0)
            if target == 0:
                preempted.append(r.job_id)
                for n in hold.pop(r.job_id):
                    free[n] += 1
            elif target < len(hold[r.job_id]):
                for n in drop_gpus(hold[r.job_id], len(hold[r.job_id]) - target):
                    free[n] += 1
                touched.add(r.job_id)
        for r in snapshot.running:
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
        # grows and starts, largest first (placement quality), then priority order
        growing = [j for j in bulk if sizes.get(j.job_id, 0) > len(hold.get(j.job_id, ()))]
        growing.sort(key=lambda j: -sizes[j.job_id])
        for j in growing:
            have = hold.get(j.job_id, [])
            extra = sizes[j.job_id] - len(have)
            if isinstance(j, RunningJob):
                added = grow_gpus(have, extra, free, self.placement)
                if added is None:
                    continue
                grows.append(
                    Decision(
                        DecisionKind.RESIZE,
                        j.job_id,
                        nodes=tuple(have + added),
                        strategy=self.placement.ray_strategy,
                        reason=f"grows to {sizes[j.job_id]} GPUs for goodput",
                    )
                )
            else:
                nodes = self.placement.place(extra, free)
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
        for j in bulk:
            if isinstance(j, QueuedJob) and j.job_id not in started:
                waits.append(Decision(DecisionKind.WAIT, j.job_id, reason="waiting for GPUs"))
        preempts = [
            Decision(DecisionKind.PREEMPT, job_id, reason="gives way") for job_id in preempted
        ]
        return preempts + shrinks + starts + grows + waits

    # ---- helpers ---------------------------------------------------------------------------

    def _make_room(
        self,
        short: int,
        running: dict[str, RunningJob],
        hold: dict[str, list[str]],
        free: dict[str, int],
        ent: dict[str, int],
        teams: Sequence[TeamView],
        now: float,
        preempted: list[str],
        touched: set[str],
    ) -> None:
        """Free ``short`` GPUs from bulk jobs: shrink elastic ones, then preempt."""
        gone = set(preempted)  # a set: this runs once per interactive job, over every job
        live = [running[k] for k in hold if k not in gone and not running[k].interactive]
        for r in sorted(live, key=lambda r: (-(len(hold[r.job_id]) - r.lo), r.seq, r.job_id)):
            if short <= 0:
                return
            spare = len(hold[r.job_id]) - r.lo
            if spare <= 0:
                break
            for n in drop_gpus(hold[r.job_id], min(spare, short)):
                free[n] += 1
                short -= 1
            touched.add(r.job_id)
        if short <= 0:
            return
        held: Counter[str] = Counter()
        for k, nodes in hold.items():
            if k not in gone:
                held[running[k].team] += len(nodes)
        current = [
            RunningJob(
                r.job_id,
                r.job_class,
                r.team,
                tuple(hold[r.job_id]),
                seq=r.seq,
                started_at=r.started_at,
                checkpoint_at=r.checkpoint_at,
            )
            for r in live
        ]
        # borrowed capacity first (teams above their entitlement), then capacity above a
        # team's guarantee, then the rest
        guarantee = {t.name: t.guaranteed_gpus for t in teams}
        tiers: tuple[list[RunningJob], list[RunningJob], list[RunningJob]] = ([], [], [])
        for c in current:
            if held[c.team] > ent.get(c.team, 0):
                tiers[0].append(c)
            elif held[c.team] > guarantee.get(c.team, 0):
                tiers[1].append(c)
            else:
                tiers[2].append(c)
        victims: list[RunningJob] = []
        need = short
        for tier in tiers:
            chosen = self.preemption.choose(tier, need, now)
            if chosen is not None:
                victims += chosen
                break
            victims += tier
            need -= sum(c.gpus for c in tier)
        for v in victims:
            if short <= 0:
                break
            preempted.append(v.job_id)
            touched.discard(v.job_id)
            for n in hold.pop(v.job_id):
                free[n] += 1
                short -= 1
        # preempted jobs keep no GPUs; re-add an empty list so later lookups are uniform
        for v in victims:
            hold.setdefault(v.job_id, [])

    def _bulk_sizes(
        self,
        bulk: Sequence[QueuedJob | RunningJob],
        hold: dict[str, list[str]],
        ent: dict[str, int],
        inter_held: Counter[str],
        bulk_pool: int,
        touched: set[str],
        snapshot: Snapshot,
    ) -> dict[str, int]:
        now = snapshot.now

        def key(j: QueuedJob | RunningJob) -> tuple[int, int, str]:
            level = (
                0
                if self.fifo
                else las_level(service(j, now), self.las_first_gpu_s, self.las_factor)
            )
            return (level, j.seq, j.job_id)

        ordered = sorted(bulk, key=key)
        guarantee = {t.name: t.guaranteed_gpus for t in snapshot.teams}
        # floors: a team's guarantee, spread over its jobs (minimums first, in order)
        g_room = {t: max(0, g - inter_held.get(t, 0)) for t, g in guarantee.items()}
        floors: dict[str, int] = {}
        for j in ordered:
            if g_room.get(j.team, 0) >= j.lo:
                floors[j.job_id] = j.lo
                g_room[j.team] -= j.lo
        for j in ordered:
            if j.job_id in floors and g_room.get(j.team, 0) > 0:
                add = min(j.hi - floors[j.job_id], g_room[j.team])
                floors[j.job_id] += add
                g_room[j.team] -= add
        # admission order: protected running jobs, then jobs within their team's entitlement,
        # then the rest (borrowers), each group in LAS order
        room = {t: max(0, e - inter_held.get(t, 0)) for t, e in ent.items()}
        held_team: Counter[str] = Counter()
        for j in ordered:
            if isinstance(j, RunningJob):
                held_team[j.team] += len(hold.get(j.job_id, ()))
        groups: tuple[list[ElasticJob], list[ElasticJob], list[ElasticJob]] = ([], [], [])
        for j in ordered:
            running = isinstance(j, RunningJob)
            started = j.started_at if isinstance(j, RunningJob) else now
            cur = len(hold.get(j.job_id, ())) if running else 0
            young = running and cur > 0 and now - started < self.min_runtime_s
            within = held_team[j.team] <= room.get(j.team, 0)
            hi = cur if j.job_id in touched else j.hi
            floor = floors.get(j.job_id, 0)
            ej = ElasticJob(
                j.job_id,
                lo=j.lo,
                hi=max(hi, j.lo),
                preferred=j.gpus,
                current=cur,
                speedup=j.speedup,
                floor=max(floor, cur) if young and within else floor,
                run_s=now - started,
            )
            if young and within:
                groups[0].append(ej)
            elif room.get(j.team, 0) >= j.lo:
                room[j.team] -= j.lo
                groups[1].append(ej)
            else:
                groups[2].append(ej)
        return self.elastic.allocate(
            groups[0] + groups[1] + groups[2], bulk_pool, snapshot.restart_cost_s
        )
