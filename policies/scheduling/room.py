"""Making room for interactive jobs: shrink elastic bulk jobs, then preempt, over one round."""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from policies.eligibility import capacity
from policies.preemption import Preemption, VictimIndex
from policies.scheduling.resize import drop_gpus
from policies.snapshot import INTERACTIVE, QueuedJob, RunningJob, Snapshot

Bulk = tuple[RunningJob, int, int, int]
"""A running bulk job with its ``lo``, ``hi`` and snapshot GPUs."""


@dataclass
class _Part:
    """The bulk jobs room is made among (the pool's, or those on one GPU kind), with their
    shrink order, victims' index and GPUs held, built when first needed and kept."""

    jobs: Sequence[Bulk]
    # heap: (-spare, seq, job id, lo, team), the job id unique (the rest never compared)
    spare: list[tuple[int, int, str, int, str]] = field(default_factory=list)
    # GPUs each team's jobs here hold above their minimum, and the minimum of each such job
    team_spare: Counter[str] = field(default_factory=Counter)
    lo: dict[str, int] = field(default_factory=dict)
    victims: VictimIndex | None = None
    gpus: int | None = None  # GPUs its jobs hold, once needed


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

    In a pool of several GPU kinds a gang runs on one kind, and an interactive job starts on
    one (:func:`policies.eligibility.off_kind`): :meth:`make` with ``kind`` frees GPUs from the
    bulk jobs on that kind alone (each kind's jobs are a part with its own shrink order and
    victims' index; the teams' counts, which the guarantees and tiers read, are the pool's).

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
        bulk: Sequence[Bulk],
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
        self._parts: dict[str | None, _Part] = {}  # None: the whole pool's bulk jobs
        self._held: Counter[str] | None = None  # bulk GPUs per team, once victims are chosen
        self._above: Counter[str] | None = None  # GPUs per team above its guarantee, to shrink

    def make(self, short: int, team: str, gpus: int, kind: str | None = None) -> int:
        """Free at least ``short`` GPUs for an interactive job of ``team`` asking for ``gpus``
        (on GPUs of ``kind``: from the bulk jobs there only); return the GPUs freed.

        When bulk jobs hold fewer than ``short`` (there), nothing is freed (0): the interactive
        job cannot start this round, and GPUs taken from bulk jobs would only go to other bulk
        jobs (a preemption for nothing). A round calls it with kinds or without, not both.
        """
        part = self._part(kind)
        if part.gpus is None:
            part.gpus = self._index(part)
        if short > part.gpus:
            return 0
        left = self._shrink(part, short)
        if left > 0:
            left = self._preempt(part, left, team, gpus)
        part.gpus -= short - left
        return short - left

    def shrinkable(self, kind: str, barred: frozenset[str]) -> int:
        """GPUs :meth:`make` would free from the bulk jobs on ``kind`` by shrinking alone,
        preempting none: each team's elastic jobs there down to their minimum, but no team
        below its guarantee (0 when one of them holds a GPU on ``barred`` nodes, where room is
        not made: :meth:`may_make`)."""
        part = self._part(kind)
        if part.gpus is None:
            part.gpus = self._index(part)
        if self.holds_bulk_on(barred, kind):
            return 0
        above = self._above_guarantee()
        return sum(min(s, above[t]) for t, s in part.team_spare.items() if s > 0 and above[t] > 0)

    def freeable(self, kind: str, barred: frozenset[str]) -> int:
        """GPUs the bulk jobs on ``kind`` hold, all :meth:`make` could free there by shrinks
        and preemptions (0 as for :meth:`shrinkable`)."""
        part = self._part(kind)
        if part.gpus is None:
            part.gpus = self._index(part)
        return 0 if self.holds_bulk_on(barred, kind) else part.gpus

    def may_make(self, job: QueuedJob, small: frozenset[str], kind: str | None = None) -> bool:
        """Whether :meth:`make` may free GPUs for an interactive ``job`` that ``small`` nodes
        are too small for (with ``kind``: the nodes of that kind it may not use): only when it
        fits the other nodes at all and no bulk job (on that kind) holds a GPU on ``small``
        (:meth:`make` frees GPUs wherever those bulk jobs hold them)."""
        return job.gpus <= capacity(self.snapshot, job) and not self.holds_bulk_on(small, kind)

    def holds_bulk_on(self, nodes: frozenset[str], kind: str | None = None) -> bool:
        """Whether a bulk job (on ``kind``) holds a GPU on ``nodes``."""
        if not nodes:
            return False
        hold = self.hold
        jobs = self._part(kind).jobs
        return any(any(n in nodes for n in hold.get(r.job_id, ())) for r, _, _, _ in jobs)

    def _part(self, kind: str | None) -> _Part:
        """The bulk jobs of the pool (``None``) or wholly on GPUs of ``kind``."""
        part = self._parts.get(kind)
        if part is not None:
            return part
        if kind is None:
            part = self._parts[None] = _Part(self.bulk)
            return part
        # every kind's part in one pass (a job spanning kinds is in none)
        of, hold = self.snapshot.kind_map.get, self.hold
        by_kind: dict[str, list[Bulk]] = {k: [] for k in self.snapshot.kinds}
        for b in self.bulk:
            on = set(map(of, hold[b[0].job_id]))
            if len(on) == 1 and (k := on.pop()) is not None:  # (None: a node not in the pool)
                by_kind.setdefault(k, []).append(b)
        for k, jobs in by_kind.items():
            self._parts.setdefault(k, _Part(jobs))
        return self._parts.setdefault(kind, _Part([]))

    def _index(self, part: _Part) -> int:
        """The part's shrink order, in one pass over its jobs (its first :meth:`make`; bulk
        jobs lose GPUs only here, so it stays valid as it is kept); returns the GPUs they
        hold."""
        hold, gone = self.hold, self.gone
        total = 0
        spare = part.spare
        for r, lo, _, _ in part.jobs:
            job_id = r.job_id
            if job_id in gone:
                continue
            held = len(hold[job_id])
            total += held
            if held > lo:
                spare.append((lo - held, r.seq, job_id, lo, r.team))
                part.team_spare[r.team] += held - lo
                part.lo[job_id] = lo
        heapq.heapify(spare)
        return total

    def _live(self, part: _Part) -> list[RunningJob]:
        """The part's running bulk jobs not preempted, in the snapshot's order."""
        return [r for r, _, _, _ in part.jobs if r.job_id not in self.gone]

    def _above_guarantee(self) -> Counter[str]:
        """GPUs each team holds above its guarantee, kept up to date through the round.

        A shrink must not take a team below its guarantee (that is for preemption to decide,
        borrowed capacity first); teams only lose GPUs during a round, and each loss is counted
        here (shrinks and preemptions, on every kind)."""
        above = self._above
        if above is None:
            hold = self.hold
            above = self._above = Counter()
            for r, _, _, _ in self.bulk:  # bulk jobs: as when first made
                if r.job_id not in self.gone:
                    above[r.team] += len(hold[r.job_id])
            for r in self.snapshot.running:  # interactive ones: as they hold now
                if r.job_class == INTERACTIVE and r.job_id not in self.gone:  # not .interactive
                    above[r.team] += len(hold[r.job_id])
            for team in above:
                above[team] -= self.guarantee.get(team, 0)
        return above

    def _shrink(self, part: _Part, short: int) -> int:
        """Shrink the part's elastic jobs towards their minimum; return the GPUs still
        short."""
        hold = self.hold
        above = self._above_guarantee()
        held_by_team = self._held
        heap = part.spare
        while short > 0 and heap:
            neg_spare, seq, job_id, lo, team = heapq.heappop(heap)
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
            part.team_spare[team] -= take
            if held_by_team is not None:  # another kind's preemptions counted them
                held_by_team[team] -= take
            self.touched.add(job_id)
            if spare > take and above[team] > 0:
                heapq.heappush(heap, (take - spare, seq, job_id, lo, team))
        return short

    def _preempt(self, part: _Part, short: int, team: str, gpus: int) -> int:
        """Preempt bulk jobs, tier by tier; return the GPUs still short.

        A team's tier is judged by its use once ``gpus`` more run for ``team``: its bulk jobs,
        its interactive jobs and the one starting.

        Only called once no job has GPUs to spare, so from here on jobs keep their sizes
        and the victims' index stays valid; jobs leave it as they are preempted.
        """
        hold = self.hold
        held = self._held
        if held is None:
            # each team's bulk GPUs (its interactive ones are ``inter_held``, counted once)
            held = self._held = Counter()
            gone = self.gone
            for r, _, _, _ in self.bulk:
                if r.job_id not in gone:
                    held[r.team] += len(hold[r.job_id])
        if part.victims is None:
            # each job as it holds now: the snapshot's own where no shrink changed it (``hold``
            # starts as the snapshot's node tuples; a shrink puts a new list in its place)
            current = [
                r
                if (nodes := hold[r.job_id]) is r.nodes
                else RunningJob(
                    r.job_id,
                    r.job_class,
                    r.team,
                    tuple(nodes),
                    seq=r.seq,
                    started_at=r.started_at,
                    checkpoint_at=r.checkpoint_at,
                )
                for r in self._live(part)
            ]
            teams = {c.job_id: c.team for c in current}
            part.victims = self.preemption.index(current, teams, self.now)
        victims_index = part.victims
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
            if (lo := part.lo.get(v.job_id)) is not None and len(nodes) > lo:
                part.team_spare[v.team] -= len(nodes) - lo  # kept at its guarantee, unshrunk
            if self._above is not None:
                self._above[v.team] -= len(nodes)
            for n in nodes:
                self.free[n] += 1
            short -= len(nodes)
        # preempted jobs keep no GPUs; re-add an empty list so later lookups are uniform
        for v in victims:
            hold.setdefault(v.job_id, [])
        return short
