"""Making room for interactive jobs: shrink elastic bulk jobs, then preempt, over one round."""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Mapping, Sequence

from policies.eligibility import capacity
from policies.preemption import Preemption, VictimIndex
from policies.scheduling.resize import drop_gpus
from policies.snapshot import INTERACTIVE, QueuedJob, RunningJob, Snapshot


class Room:
    """Frees GPUs for interactive jobs from bulk jobs, over one round.

    :meth:`make`, when bulk jobs hold enough GPUs, shrinks elastic jobs towards their minimum
    (most to spare first, then submission order), never taking a team below its guarantee that
    way, then preempts whole bulk jobs: borrowed capacity (teams above their entitlement)
    first, then capacity above a team's guarantee, then the rest; within a tier,
    victims are chosen by the ``preemption`` policy. A team's use, for the tiers, counts its
    interactive jobs too, the one being started included: an interactive start that puts its
    own team over its entitlement takes that team's bulk jobs first, rather than a job of a
    team within its guarantee that would then reclaim its GPUs from the starting team (two
    preemptions for one start). Bulk jobs only lose GPUs during a round,
    so the shrink order and the victims' index are built once, when first needed, and
    consumed: a job shrunk to its minimum or preempted drops out of them. Each call then costs
    about the jobs it disturbs, not every running job.

    Args:
        preemption: the victim choice.
        snapshot: the round's snapshot.
        hold: the GPUs each running job holds now (updated).
        free: free GPUs per node (updated).
        ent: each team's entitlement this round.
        preempted: jobs preempted so far this round (appended to, in order).
        touched: jobs shrunk this round (updated).
        inter_held: GPUs each team's interactive jobs hold, those started this round
            included (read, kept up to date by the caller).
        bulk: the running bulk jobs with their ``lo``, ``hi`` and snapshot GPUs, in snapshot
            order (read once per round by the caller).
    """

    def __init__(
        self,
        preemption: Preemption,
        snapshot: Snapshot,
        hold: dict[str, Sequence[str]],
        free: dict[str, int],
        ent: dict[str, int],
        preempted: list[str],
        touched: set[str],
        inter_held: Mapping[str, int],
        bulk: Sequence[tuple[RunningJob, int, int, int]],
    ) -> None:
        self.preemption = preemption
        self.now = snapshot.now
        self.guarantee = {t.name: t.guaranteed_gpus for t in snapshot.teams}
        self.snapshot = snapshot
        self.hold = hold
        self.free = free
        self.ent = ent
        self.preempted = preempted
        self.gone = set(preempted)
        self.touched = touched
        self.inter_held = inter_held
        self.bulk = bulk
        self.running: dict[str, RunningJob] = {}  # by id, once victims are chosen
        # heap: (-spare, seq, job id, lo, team), the job id unique (the rest never compared)
        self._spare: list[tuple[int, int, str, int, str]] = []
        self._victims: VictimIndex | None = None
        self._held: Counter[str] = Counter()  # GPUs per team, once victims are chosen
        self._above: Counter[str] | None = None  # GPUs per team above its guarantee, to shrink
        self._team_bulk: Counter[str] = Counter()  # GPUs per team's bulk jobs, first make
        self._bulk: int | None = None  # GPUs bulk jobs hold, once needed

    def make(self, short: int, team: str, gpus: int) -> int:
        """Free at least ``short`` GPUs for an interactive job of ``team`` asking for ``gpus``;
        return the GPUs freed.

        When bulk jobs hold fewer than ``short``, nothing is freed (0): the interactive job
        cannot start this round, and GPUs taken from bulk jobs would only go to other bulk
        jobs (a preemption for nothing).
        """
        if self._bulk is None:
            self._bulk = self._index()
        if short > self._bulk:
            return 0
        left = self._shrink(short)
        if left > 0:
            left = self._preempt(left, team, gpus)
        self._bulk -= short - left
        return short - left

    def may_make(self, job: QueuedJob, small: frozenset[str]) -> bool:
        """Whether :meth:`make` may free GPUs for an interactive ``job`` that ``small`` nodes
        are too small for: only when it fits the other nodes at all and no bulk job holds a GPU
        on ``small`` (:meth:`make` frees GPUs wherever bulk jobs hold them)."""
        if job.gpus > capacity(self.snapshot, job):
            return False
        hold = self.hold
        return not any(any(n in small for n in hold.get(r.job_id, ())) for r, _, _, _ in self.bulk)

    def _index(self) -> int:
        """The shrink order, in one pass over the bulk jobs (the first :meth:`make`; bulk jobs
        lose GPUs only here, so it stays valid as it is kept); returns the GPUs they hold."""
        hold, gone, team_bulk = self.hold, self.gone, self._team_bulk
        total = 0
        spare = self._spare
        for r, lo, _, _ in self.bulk:
            job_id = r.job_id
            if job_id in gone:
                continue
            held = len(hold[job_id])
            total += held
            team_bulk[r.team] += held
            if held > lo:
                spare.append((lo - held, r.seq, job_id, lo, r.team))
        heapq.heapify(spare)
        return total

    def _live(self) -> list[RunningJob]:
        """Running bulk jobs not preempted, in the snapshot's order."""
        return [r for r, _, _, _ in self.bulk if r.job_id not in self.gone]

    def _shrink(self, short: int) -> int:
        """Shrink elastic jobs towards their minimum; return the GPUs still short."""
        hold = self.hold
        if self._above is None:
            # A shrink must not take a team below its guarantee (that is for preemption to
            # decide, borrowed capacity first); teams only lose GPUs during a round.
            self._above = above = Counter(self._team_bulk)  # bulk jobs: as when first made
            for r in self.snapshot.running:  # interactive ones: as they hold now
                if r.job_class == INTERACTIVE and r.job_id not in self.gone:  # not .interactive
                    above[r.team] += len(hold[r.job_id])
            for team in self._above:
                self._above[team] -= self.guarantee.get(team, 0)
        above = self._above
        assert above is not None
        while short > 0 and self._spare:
            neg_spare, seq, job_id, lo, team = heapq.heappop(self._spare)
            spare = len(hold[job_id]) - lo
            if job_id in self.gone or spare != -neg_spare:
                continue  # stale: only the shrinks below change a job's spare GPUs
            take = min(spare, short, above[team])
            if take <= 0:
                continue  # its team is at its guarantee: it stays as it is this round
            nodes = hold[job_id] = list(hold[job_id])
            for n in drop_gpus(nodes, take):
                self.free[n] += 1
            short -= take
            above[team] -= take
            self.touched.add(job_id)
            if spare > take and above[team] > 0:
                heapq.heappush(self._spare, (take - spare, seq, job_id, lo, team))
        return short

    def _preempt(self, short: int, team: str, gpus: int) -> int:
        """Preempt bulk jobs, tier by tier; return the GPUs still short.

        A team's tier is judged by its use once ``gpus`` more run for ``team``: its bulk jobs,
        its interactive jobs and the one starting.

        Only called once no job has GPUs to spare, so from here on jobs keep their sizes
        and the victims' index stays valid; jobs leave it as they are preempted.
        """
        hold, held = self.hold, self._held
        if self._victims is None:
            self.running = {r.job_id: r for r in self.snapshot.running}
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
                for r in self._live()
            ]
            teams = {c.job_id: c.team for c in current}
            self._victims = self.preemption.index(current, teams, self.now)
            for k, nodes in hold.items():
                if k not in self.gone:
                    held[self.running[k].team] += len(nodes)
        victims_index = self._victims
        tiers: tuple[list[str], list[str], list[str]] = ([], [], [])
        for t, bulk in held.items():
            use = bulk + self.inter_held.get(t, 0) + (gpus if t == team else 0)
            if use > self.ent.get(t, 0):
                tiers[0].append(t)
            elif use > self.guarantee.get(t, 0):
                tiers[1].append(t)
            else:
                tiers[2].append(t)
        victims: list[RunningJob] = []
        need = short
        for tier in tiers:
            chosen = victims_index.choose(tier, need)
            if chosen is not None:
                victims += chosen
                break
            victims += victims_index.members(tier)
            need -= victims_index.total(tier)
        for v in victims:
            if short <= 0:
                break
            self.preempted.append(v.job_id)
            self.gone.add(v.job_id)
            self.touched.discard(v.job_id)
            victims_index.remove(v.job_id)
            nodes = hold.pop(v.job_id)
            held[v.team] -= len(nodes)
            for n in nodes:
                self.free[n] += 1
            short -= len(nodes)
        # preempted jobs keep no GPUs; re-add an empty list so later lookups are uniform
        for v in victims:
            hold.setdefault(v.job_id, [])
        return short
