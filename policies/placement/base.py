"""Placement: on which nodes a job's gang of GPUs goes."""

from __future__ import annotations

import abc
from collections.abc import Collection, Iterable, Mapping
from heapq import heappop, heappush
from itertools import compress

from policies.registry import Registry


class Placement(abc.ABC):
    """Chooses nodes for a gang of ``gpus`` GPUs given the free GPUs per node.

    Contract: ``place`` is pure and deterministic; it returns one node id per GPU (so a node id
    repeats for each GPU taken on that node) and never more GPUs on a node than ``free`` says, or
    ``None`` when the gang does not fit right now. The whole gang is placed or nothing is.
    ``ray_strategy`` names the Ray placement-group strategy that realises the same intent.
    """

    ray_strategy: str = "PACK"

    @abc.abstractmethod
    def place(self, gpus: int, free: Mapping[str, int]) -> tuple[str, ...] | None:
        """Return the node id of each of the ``gpus`` GPUs, or ``None`` if it cannot fit.

        Args:
            gpus: gang size, at least 1.
            free: free GPUs per node id; iteration order is the pool's stable node order.
        """


PLACEMENTS: Registry[Placement] = Registry("placement")


def without(free: Mapping[str, int], nodes: Collection[str]) -> Mapping[str, int]:
    """``free`` less ``nodes``: what a placement may take for a job that must not go there
    (``Snapshot.barred``: its GPU memory and kinds). ``free`` itself when ``nodes`` is empty, so
    callers take the GPUs a placement returns from ``free``, never from this."""
    if not nodes:
        return free
    return {n: f for n, f in free.items() if n not in nodes}


def free_total(free: Mapping[str, int]) -> int:
    """Free GPUs over all nodes (a negative count counts as none)."""
    counts = free.values()
    if not counts or min(counts) >= 0:
        return sum(counts)
    return sum(f for f in counts if f > 0)


def by_most_free(free: Mapping[str, int]) -> list[str]:
    """Nodes with free GPUs, most free first, in pool order among equals."""
    nodes = [n for n in compress(free, free.values()) if free[n] > 0]
    nodes.sort(key=free.__getitem__, reverse=True)  # stable: pool order among equals
    return nodes


def best_fit(gpus: int, free: Mapping[str, int], among: Iterable[str] | None = None) -> str | None:
    """The node with the fewest free GPUs that still holds ``gpus`` (first in order on ties).

    Args:
        gpus: GPUs the node must have free, at least 1.
        free: free GPUs per node id (a :class:`FreeIndex` answers from its index).
        among: the nodes to consider, in the order ties go by (default: every node, pool order).
    """
    if among is None and type(free) is FreeIndex:
        return free.best_fit(gpus)
    return _scan(gpus, free, among)


def _scan(gpus: int, free: Mapping[str, int], among: Iterable[str] | None) -> str | None:
    """:func:`best_fit` by looking at every node (with free GPUs, or ``among``)."""
    best: str | None = None
    most = 0
    for n in compress(free, free.values()) if among is None else among:
        f = free[n]
        if f >= gpus and (best is None or f < most):
            best, most = n, f
            if f == gpus:
                break  # nothing fits tighter
    return best


class FreeIndex(dict[str, int]):
    """Free GPUs per node (a ``dict``, pool order) that files its nodes by free count once
    placements come one after another, so :func:`best_fit` over the whole pool looks at a few
    nodes instead of scanning them all.

    For a round that places hundreds of gangs in a row (``shared`` starts about 900 at 1,000
    queued jobs, most of one GPU), a scan per gang was a third of the round; building the index
    costs about ten scans, so the first :data:`SCANS` calls scan (most rounds place a few). Every
    change goes through ``free[node] = count`` (``-=``, ``+=``), which files the node under its
    new count; entries left under an old count are dropped when met (lazily). Same answers as
    the scan: the fewest free GPUs that hold the gang, the first in pool order among those.
    """

    SCANS = 8

    def __init__(self, free: Mapping[str, int], groups: Mapping[str, str] | None = None) -> None:
        super().__init__(free)
        # with ``groups`` (node -> group: its GPU kind), the free GPUs of each group and an
        # index of each group's nodes alone (``parts``), kept as counts change: a placement on
        # one kind sees at once whether the kind has room, and looks at its nodes only
        self.groups = groups
        self.group_free: dict[str, int] | None = None
        self.parts: dict[str, FreeIndex] | None = None
        if groups is not None:
            sums: dict[str, int] = {}
            members: dict[str, dict[str, int]] = {}
            for n, f in self.items():
                g = groups.get(n, "")
                sums[g] = sums.get(g, 0) + (f if f > 0 else 0)
                members.setdefault(g, {})[n] = f
            self.group_free = sums
            self.parts = {g: FreeIndex(m) for g, m in members.items()}
        self._scans = 0
        self._names: list[str] = []
        self._pos: dict[str, int] = {}
        # heaps of pool positions by free count (the index), once built: a node may be stale
        # in one (its count changed since), and is dropped from it when met
        self._at: list[list[int]] | None = None

    def __setitem__(self, node: str, count: int) -> None:
        parts = self.parts
        if parts is not None:  # (with groups: group_free and groups are set too)
            old = self.get(node, 0)
            g = self.groups.get(node, "")  # type: ignore[union-attr]
            sums = self.group_free
            sums[g] = sums.get(g, 0) + (count if count > 0 else 0) - (old if old > 0 else 0)  # type: ignore[index,union-attr]
            part = parts.get(g)
            if part is None:
                part = parts[g] = FreeIndex({})
            part[node] = count
        dict.__setitem__(self, node, count)
        at = self._at
        if at is not None and count > 0:
            while count >= len(at):
                at.append([])
            heappush(at[count], self._pos[node])

    def best_fit(self, gpus: int) -> str | None:
        """:func:`best_fit` over every node (see there)."""
        at = self._at
        if at is None:
            self._scans += 1
            if self._scans <= self.SCANS:
                return _scan(gpus, self, None)
            at = self._build()
        names = self._names
        for count in range(gpus, len(at)):
            heap = at[count]
            while heap:
                node = names[heap[0]]
                if self[node] == count:
                    return node
                heappop(heap)  # stale: the node has another count now
        return None

    def _build(self) -> list[list[int]]:
        """The index, from the counts as they are."""
        self._names = names = list(self)
        self._pos = {n: i for i, n in enumerate(names)}
        at: list[list[int]] = [[] for _ in range(max(self.values(), default=0) + 1)]
        for i, f in enumerate(self.values()):
            if f > 0:
                at[f].append(i)  # ascending: already a heap
        self._at = at
        return at
