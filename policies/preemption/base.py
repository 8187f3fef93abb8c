"""Preemption: which running bulk jobs give way when GPUs are needed now."""

from __future__ import annotations

import abc
import heapq
from bisect import bisect_left
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from policies.registry import Registry
from policies.snapshot import RunningJob

VictimKey = Callable[[RunningJob], Any]
"""A sort key over candidate victims (a tuple that ends with the job id)."""


class Preemption(abc.ABC):
    """Chooses victims among running bulk jobs to free at least ``need`` GPUs.

    Contract: pure and deterministic. ``choose`` returns a subset of ``candidates`` (never an
    interactive job) whose GPUs sum to at least ``need``, or ``None`` when all of them together
    free too few. Jobs that started less than ``min_runtime_s`` ago are protected: they are
    chosen only when the unprotected ones cannot free enough (a start always beats a wait
    while preemptible capacity exists; protection only orders the victims).

    A policy whose ``pick`` takes a prefix of one fixed order (see :func:`pick_in_order`) says
    so through ``rank_key`` (and ``single_key``); :meth:`index` then answers repeated
    ``choose`` calls of one round without re-sorting the candidates each time.

    Args:
        min_runtime_s: the minimum-runtime protection.
    """

    def __init__(self, min_runtime_s: float = 300.0) -> None:
        self.min_runtime_s = min_runtime_s

    def choose(
        self, candidates: Sequence[RunningJob], need: int, now: float
    ) -> list[RunningJob] | None:
        """Victims freeing at least ``need`` GPUs, unprotected first; ``None`` if impossible."""
        pool = [c for c in candidates if not c.interactive]
        if need <= 0:
            return []
        if sum(c.gpus for c in pool) < need:
            return None
        young = [c for c in pool if now - c.started_at < self.min_runtime_s]
        old = [c for c in pool if now - c.started_at >= self.min_runtime_s]
        if sum(c.gpus for c in old) >= need:
            return self.pick(old, need, now)
        rest = need - sum(c.gpus for c in old)
        return old + self.pick(young, rest, now)

    @abc.abstractmethod
    def pick(self, pool: Sequence[RunningJob], need: int, now: float) -> list[RunningJob]:
        """Victims from ``pool`` (which can free ``need``) freeing at least ``need`` GPUs."""

    def rank_key(self, now: float) -> VictimKey | None:
        """The order ``pick`` takes victims in, if it is :func:`pick_in_order`; else ``None``."""
        return None

    def single_key(self, now: float) -> VictimKey | None:
        """``pick_in_order``'s rule for a need one job can meet alone (``None``: no such rule)."""
        return None

    def index(
        self, candidates: Sequence[RunningJob], groups: Mapping[str, str], now: float
    ) -> VictimIndex:
        """An index answering many ``choose`` calls over ``candidates`` in one round.

        Args:
            candidates: the round's candidate victims, in the order ``choose`` would see them.
            groups: each candidate's group (e.g. its team): a call chooses among some groups.
            now: the round's clock.
        """
        rank = self.rank_key(now)
        if rank is None or type(self).choose is not Preemption.choose:
            return VictimIndex(self, candidates, groups, now)
        return OrderedVictimIndex(self, candidates, groups, now, rank, self.single_key(now))


PREEMPTIONS: Registry[Preemption] = Registry("preemption")


def lost_work(job: RunningJob, now: float) -> float:
    """GPU-seconds of work lost if ``job`` stops now (run since its last checkpoint)."""
    return job.gpus * max(0.0, now - max(job.checkpoint_at, job.started_at))


def trim(chosen: list[RunningJob], need: int) -> list[RunningJob]:
    """Drop victims that are not needed (last chosen first)."""
    total = sum(c.gpus for c in chosen)
    for c in reversed(list(chosen)):
        if total - c.gpus >= need:
            chosen.remove(c)
            total -= c.gpus
    return chosen


def pick_in_order(
    pool: Sequence[RunningJob], need: int, rank: VictimKey, single: VictimKey | None = None
) -> list[RunningJob]:
    """The usual ``pick``: one job by ``single`` if one can free ``need`` alone, else a prefix.

    With ``single``, the job minimal by it among those with at least ``need`` GPUs, if any.
    Otherwise jobs in ``rank`` order until they free ``need``, then :func:`trim`.
    """
    if single is not None:
        singles = [c for c in pool if c.gpus >= need]
        if singles:
            return [min(singles, key=single)]
    chosen: list[RunningJob] = []
    got = 0
    for c in sorted(pool, key=rank):
        chosen.append(c)
        got += c.gpus
        if got >= need:
            break
    return trim(chosen, need)


class VictimIndex:
    """The candidates of one round, from which victims are chosen again and again.

    ``choose(groups, need)`` returns what ``policy.choose`` returns for the candidates still in
    the index whose group is in ``groups``, in candidate order; ``remove`` takes one out (it was
    preempted). Candidates never change otherwise. This generic index filters and calls
    ``policy.choose`` (linear in the candidates per call); :class:`OrderedVictimIndex` is the
    fast one.
    """

    def __init__(
        self,
        policy: Preemption,
        candidates: Sequence[RunningJob],
        groups: Mapping[str, str],
        now: float,
    ) -> None:
        self.policy = policy
        self.now = now
        self.groups = groups
        self._jobs = {c.job_id: c for c in candidates if not c.interactive}

    def remove(self, job_id: str) -> None:
        """Take a job out of the candidates (no-op when it is not one)."""
        self._jobs.pop(job_id, None)

    def members(self, groups: Collection[str]) -> list[RunningJob]:
        """The candidates left in ``groups``, in candidate order."""
        return [c for c in self._jobs.values() if self.groups[c.job_id] in groups]

    def total(self, groups: Collection[str]) -> int:
        """GPUs of the candidates left in ``groups``."""
        return sum(c.gpus for c in self.members(groups))

    def choose(self, groups: Collection[str], need: int) -> list[RunningJob] | None:
        """``policy.choose`` over the candidates left in ``groups``."""
        return self.policy.choose(self.members(groups), need, self.now)


_OLD, _YOUNG, _NEITHER = range(3)
"""Protection classes: started at least ``min_runtime_s`` ago, less, neither (a NaN clock)."""


class OrderedVictimIndex(VictimIndex):
    """:class:`VictimIndex` for a policy whose ``pick`` is :func:`pick_in_order`.

    Candidates are sorted once per group and protection class: by candidate order, by ``rank``
    and, per GPU count, by ``single``. A call merges the sorted lists of its groups and reads
    only as far as it needs; ties in a key go to the earlier candidate, as a stable sort of the
    candidates breaks them. A removal is a binary search in each list.
    """

    def __init__(
        self,
        policy: Preemption,
        candidates: Sequence[RunningJob],
        groups: Mapping[str, str],
        now: float,
        rank: VictimKey,
        single: VictimKey | None,
    ) -> None:
        super().__init__(policy, candidates, groups, now)
        self._rank_key = rank
        self._single_key = single
        self._at = list(self._jobs.values())
        self._pos = {c.job_id: i for i, c in enumerate(self._at)}
        self._cls: dict[str, int] = {}
        self._total: dict[str, int] = {}
        self._old: dict[str, int] = {}
        self._by_pos: dict[tuple[str, int], list[int]] = {}
        # the sorted lists of a group and class, made when a call first reads them (a round
        # that preempts reads a few teams' lists, often one: the keys cost most of the index)
        self._rank: dict[tuple[str, int], list[tuple[Any, int]]] = {}
        self._single: dict[tuple[str, int], dict[int, list[tuple[Any, int]]]] = {}
        protect = policy.min_runtime_s
        for pos, c in enumerate(self._at):
            g = groups[c.job_id]
            age = now - c.started_at
            cls = _OLD if age >= protect else _YOUNG if age < protect else _NEITHER
            self._cls[c.job_id] = cls
            self._total[g] = self._total.get(g, 0) + c.gpus
            if cls == _OLD:
                self._old[g] = self._old.get(g, 0) + c.gpus
            self._by_pos.setdefault((g, cls), []).append(pos)

    def _ranked(self, key: tuple[str, int]) -> list[tuple[Any, int]]:
        """The candidates left in a group and class by ``rank`` (made on first read)."""
        ranked = self._rank.get(key)
        if ranked is None:
            rank, at = self._rank_key, self._at
            ranked = self._rank[key] = sorted((rank(at[p]), p) for p in self._by_pos.get(key, ()))
        return ranked

    def _singles(self, key: tuple[str, int]) -> dict[int, list[tuple[Any, int]]]:
        """The candidates left in a group and class per GPU count, by ``single`` (made on
        first read; ``single`` is set)."""
        by_gpus = self._single.get(key)
        if by_gpus is None:
            single, at = self._single_key, self._at
            assert single is not None
            by_gpus = self._single[key] = {}
            for p in self._by_pos.get(key, ()):
                c = at[p]
                by_gpus.setdefault(c.gpus, []).append((single(c), p))
            for ranked in by_gpus.values():
                ranked.sort()
        return by_gpus

    def remove(self, job_id: str) -> None:
        """See :meth:`VictimIndex.remove`."""
        c = self._jobs.pop(job_id, None)
        if c is None:
            return
        g, cls, pos = self.groups[job_id], self._cls[job_id], self._pos[job_id]
        key = (g, cls)
        self._total[g] -= c.gpus
        if cls == _OLD:
            self._old[g] -= c.gpus
        _discard(self._by_pos[key], pos)
        if (ranked := self._rank.get(key)) is not None:
            _discard(ranked, (self._rank_key(c), pos))
        if (by_gpus := self._single.get(key)) is not None:
            assert self._single_key is not None
            _discard(by_gpus[c.gpus], (self._single_key(c), pos))
            if not by_gpus[c.gpus]:
                del by_gpus[c.gpus]

    def members(
        self, groups: Collection[str], classes: Sequence[int] = (_OLD, _YOUNG, _NEITHER)
    ) -> list[RunningJob]:
        """See :meth:`VictimIndex.members` (optionally only some protection classes)."""
        lists = [
            self._by_pos[(g, cls)] for g in groups for cls in classes if (g, cls) in self._by_pos
        ]
        return [self._at[pos] for pos in heapq.merge(*lists)]

    def total(self, groups: Collection[str]) -> int:
        """See :meth:`VictimIndex.total`."""
        return sum(self._total.get(g, 0) for g in groups)

    def choose(self, groups: Collection[str], need: int) -> list[RunningJob] | None:
        """See :meth:`VictimIndex.choose` (the logic of :meth:`Preemption.choose`)."""
        if need <= 0:
            return []
        if self.total(groups) < need:
            return None
        old = sum(self._old.get(g, 0) for g in groups)
        if old >= need:
            return self._pick(groups, _OLD, need)
        return self.members(groups, (_OLD,)) + self._pick(groups, _YOUNG, need - old)

    def _pick(self, groups: Collection[str], cls: int, need: int) -> list[RunningJob]:
        """:func:`pick_in_order` over the candidates left in ``groups`` and class ``cls``."""
        keys = [(g, cls) for g in groups if (g, cls) in self._by_pos]
        if self._single_key is not None:
            best: tuple[Any, int] | None = None
            for key in keys:
                for gpus, ranked in self._singles(key).items():
                    if gpus >= need and (best is None or ranked[0] < best):
                        best = ranked[0]
            if best is not None:
                return [self._at[best[1]]]
        chosen: list[RunningJob] = []
        got = 0
        for _, pos in heapq.merge(*(self._ranked(key) for key in keys)):
            c = self._at[pos]
            chosen.append(c)
            got += c.gpus
            if got >= need:
                break
        return trim(chosen, need)


def _discard(items: list[Any], item: Any) -> None:
    """Remove ``item`` from the sorted list ``items`` (it is there)."""
    del items[bisect_left(items, item)]
