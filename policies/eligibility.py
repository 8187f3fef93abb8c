"""Which nodes a job may use: its GPU memory and GPU kinds, its reachable pool, why it waits,
and on which kind its gang goes.

The rules themselves are :meth:`~policies.snapshot.NodeView.holds` (memory) and
:meth:`~policies.snapshot.QueuedJob.allows` (``gpu_kinds``, ``exclude_kinds``), applied to a
round's nodes by :meth:`~policies.snapshot.Snapshot.barred`. Every policy that chooses nodes
goes through :func:`usable` or :func:`place` (or passes ``barred`` to
:func:`~policies.scheduling.resize.grow_gpus`), and sizes a job against :func:`capacity` rather
than the whole pool, so a job never counts on, nor takes, GPUs it may not use. A job that needs
no memory and names no kind sees a pool of one kind unchanged.

**A gang runs on one kind** (its step is as slow as its slowest GPU, and a config is tuned per
kind): in a pool of several kinds :func:`place` tries the job's kinds in :func:`kind_order`, each
alone. A bulk job takes the kind on which it is fastest per GPU (its own measured or predicted
``kind_speed``, else the kind's ``speed``), the cheaper kind among equals; an interactive job
whose slowest sufficient speed is known (``min_speed``) takes the cheapest kind that meets it
(a kind's ``speed`` is its cost), else the fastest. Jobs choose in the policy's order (a bulk
job admitted first picks first), which is greedy: no exchange between jobs (Sia's
cluster-wide assignment) is made.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import NamedTuple, Protocol, cast

from policies.placement import Placement, without
from policies.placement.base import FreeIndex
from policies.snapshot import QueuedJob, RunningJob, Snapshot

__all__ = [
    "MakesRoom",
    "StartOn",
    "capacity",
    "grow_barred",
    "kind_order",
    "off_kind",
    "place",
    "place_on",
    "usable",
    "why_barred",
]


def usable(
    free: Mapping[str, int], snapshot: Snapshot, job: QueuedJob | RunningJob
) -> Mapping[str, int]:
    """``free`` on the nodes the job may use (``free`` itself when that is every node): what a
    placement may take for it. Take the GPUs it returns from ``free``."""
    return without(free, snapshot.barred(job))


def grow_barred(snapshot: Snapshot, job: RunningJob) -> frozenset[str]:
    """Nodes a running job's grow may not take: :meth:`Snapshot.barred`, and in a pool of
    several kinds every node of another kind than those it runs on (its gang stays on one)."""
    barred = snapshot.barred(job)
    if not snapshot.mixed:
        return barred
    kind_of = snapshot.kind_of
    held = {kind_of(n) for n in job.nodes}
    other = (n for k, nodes in snapshot.kind_nodes.items() if k not in held for n in nodes)
    return barred.union(other)


class StartOn(NamedTuple):
    """Where an interactive job is to start (:func:`off_kind`)."""

    off: frozenset[str]
    """The nodes it may not take."""
    free: int | None
    """The free GPUs outside them (``None`` in a pool of one kind: the caller sums them if it
    needs them)."""
    kind: str | None
    """The kind it is to start on (``None`` in a pool of one kind, or when no kind has room
    for it at all)."""


class MakesRoom(Protocol):
    """What an interactive start may free on a kind (``policies.scheduling.room.Room``), for
    :func:`off_kind`: each is 0 when a bulk job of the kind holds a GPU on a node the job may
    not use (room is then not made there at all)."""

    def shrinkable(self, kind: str, barred: frozenset[str]) -> int:
        """GPUs the kind's bulk jobs would give up by shrinking alone."""
        ...

    def freeable(self, kind: str, barred: frozenset[str]) -> int:
        """GPUs the kind's bulk jobs hold (shrinks and preemptions together)."""
        ...


def off_kind(
    snapshot: Snapshot,
    job: QueuedJob | RunningJob,
    free: Mapping[str, int],
    room: MakesRoom | None = None,
) -> StartOn:
    """:meth:`Snapshot.barred`, and in a pool of several kinds every node of another kind than
    the one the job is to start on, the first in :func:`kind_order`:

    1. with room for its gang free now;
    2. (with ``room``) where shrinking bulk jobs alone makes that room: a kind where shrinks
       suffice is taken before one where bulk jobs would lose their work since a checkpoint;
    3. (with ``room``) where shrinks and preemptions can make that room;
    4. with room for it at all (nothing can be made now: it waits for that kind).

    An interactive job whose latency some kinds meet (``min_speed``) goes through 1-3 on those
    kinds first, then on the others: bulk jobs give way on a kind that meets its latency
    before it starts on one too slow for it.

    Where room is made for an interactive start (bulk GPUs freed), it is made on that kind
    only (``Room.make`` with the kind)."""
    barred = snapshot.barred(job)
    if not snapshot.mixed:
        return StartOn(barred, None, None)
    order = kind_order(snapshot, job)
    sums = free.group_free if not barred and isinstance(free, FreeIndex) else None
    if sums is not None:  # each kind's free GPUs, as the round's index keeps them
        have = {k: sums.get(k, 0) for k in order}
    else:
        have = {k: kind_free(free, snapshot, job, k) for k in order}
    gpus = job.gpus
    floor = job.min_speed if job.interactive else 0.0
    groups: list[Sequence[str]] = [order]
    if floor > 0:  # the kinds that meet its latency first, whatever it takes there
        kinds = snapshot.kinds
        meets = [k for k in order if job.speed_on(k, kinds[k]) >= floor]
        groups = [meets, [k for k in order if k not in meets]]
    target: str | None = None
    for group in groups:
        target = _start_kind(group, have, gpus, barred, room)
        if target is not None:
            break
    if target is None:
        target = next((k for k in order if _kind_capacity(snapshot, job, k) >= gpus), None)
    key = ("off", job.gpu_memory_gb, job.gpu_kinds, job.exclude_kinds, target)
    off = snapshot.memo.get(key)
    if off is None:
        nodes = snapshot.kind_nodes
        off = barred.union(n for k, ids in nodes.items() if k != target for n in ids)
        snapshot.memo[key] = off
    there = have.get(target, 0) if target is not None else 0
    return StartOn(off, there, target)  # type: ignore[arg-type]


def _start_kind(
    kinds: Sequence[str],
    have: Mapping[str, int],
    gpus: int,
    barred: frozenset[str],
    room: MakesRoom | None,
) -> str | None:
    """The first of ``kinds`` with ``gpus`` free now, else (with ``room``) where shrinks alone
    make them free, else where shrinks and preemptions can (``None``: none of them)."""
    for k in kinds:
        if have[k] >= gpus:
            return k
    if room is None:
        return None
    for k in kinds:
        if have[k] + room.shrinkable(k, barred) >= gpus:
            return k
    for k in kinds:
        if have[k] + room.freeable(k, barred) >= gpus:
            return k
    return None


def kind_free(
    free: Mapping[str, int], snapshot: Snapshot, job: QueuedJob | RunningJob, kind: str
) -> int:
    """Free GPUs of ``kind`` the job may use (a :class:`FreeIndex` with groups keeps each
    kind's sum)."""
    barred = snapshot.barred(job)
    if not barred and isinstance(free, FreeIndex) and free.group_free is not None:
        return free.group_free.get(kind, 0)
    get = free.get
    return sum(get(n, 0) for n in snapshot.kind_nodes.get(kind, ()) if n not in barred)


def _kind_capacity(snapshot: Snapshot, job: QueuedJob | RunningJob, kind: str) -> int:
    """GPUs of ``kind`` the job may use."""
    barred = snapshot.barred(job)
    if not barred:
        return snapshot.kind_gpus.get(kind, 0)
    totals = {n.node_id: n.total_gpus for n in snapshot.nodes}
    return sum(totals[n] for n in snapshot.kind_nodes.get(kind, ()) if n not in barred)


def capacity(snapshot: Snapshot, job: QueuedJob | RunningJob) -> int:
    """GPUs in the pool the job could ever run on at once: every GPU it may use, of its
    largest kind when the pool has several (a gang takes one kind)."""
    barred = snapshot.barred(job)
    if not barred and not snapshot.mixed:
        return snapshot.total_gpus
    key = ("capacity", job.gpu_memory_gb, job.gpu_kinds, job.exclude_kinds)
    got = snapshot.memo.get(key)
    if got is None:
        if not snapshot.mixed:
            got = sum(n.total_gpus for n in snapshot.nodes if n.node_id not in barred)
        else:
            got = max((_kind_capacity(snapshot, job, k) for k in snapshot.kinds), default=0)
        snapshot.memo[key] = got
    return int(got)  # type: ignore[call-overload]


def kind_order(snapshot: Snapshot, job: QueuedJob | RunningJob) -> tuple[str, ...]:
    """The kinds the job allows, in the order it takes them (see the module doc)."""
    floor = job.min_speed if job.interactive and job.min_speed > 0 else 0.0
    kinds = cast("tuple[tuple[str, float], ...] | None", snapshot.memo.get(_KINDS))
    if kinds is None:
        kinds = tuple(snapshot.kinds.items())
        snapshot.memo[_KINDS] = kinds
    return _kind_order(
        kinds,
        job.gpu_kinds,
        job.exclude_kinds,
        job.kind_speed,
        floor,
    )


_KINDS = ("kinds",)  # the memo's key for the pool's kinds as a tuple (hashable)


# A pure function of the pool's kinds and the job's requirements, asked for every job every
# round (the simulator: each running job's move, each placement): kept across rounds, which
# see the same kinds and mostly the same jobs (a per-round memo recomputed every job with
# speeds of its own, a tenth of a simulated round). functools' LRU bounds it.
@lru_cache(maxsize=1 << 16)
def _kind_order(
    kinds: tuple[tuple[str, float], ...],
    gpu_kinds: tuple[str, ...],
    exclude_kinds: tuple[str, ...],
    kind_speed: tuple[tuple[str, float], ...],
    floor: float,
) -> tuple[str, ...]:
    """:func:`kind_order` for the pool's ``kinds`` (name and speed, fastest first) and a job's
    requirements (``floor``: an interactive job's ``min_speed``, else 0)."""
    own: dict[str, float] = {}
    for name, v in kind_speed:  # the first entry for a kind, as ``speed_on`` reads them
        own.setdefault(name, v)
    speed = {
        k: own.get(k, s)
        for k, s in kinds
        if (not gpu_kinds or k in gpu_kinds) and k not in exclude_kinds
    }
    if floor > 0:
        cost = dict(kinds)
        meets = sorted((k for k, v in speed.items() if v >= floor), key=cost.__getitem__)
        rest = sorted((k for k, v in speed.items() if v < floor), key=lambda k: -speed[k])
        return (*meets, *rest)
    # fastest for the job first; among equals the cheaper kind (``kinds``: fastest first)
    cost = dict(kinds)
    return tuple(sorted(speed, key=lambda k: (-speed[k], cost[k])))


def place(
    placement: Placement,
    gpus: int,
    free: Mapping[str, int],
    snapshot: Snapshot,
    job: QueuedJob | RunningJob,
) -> tuple[str, ...] | None:
    """A gang of ``gpus`` for ``job`` on the nodes it may use, on one kind, by ``placement``
    (``None``: it fits on no kind now). Take the GPUs it returns from ``free``."""
    if not snapshot.mixed:
        return placement.place(gpus, usable(free, snapshot, job))
    for kind in kind_order(snapshot, job):
        nodes = place_on(placement, gpus, free, snapshot, job, kind)
        if nodes is not None:
            return nodes
    return None


def place_on(
    placement: Placement,
    gpus: int,
    free: Mapping[str, int],
    snapshot: Snapshot,
    job: QueuedJob | RunningJob,
    kind: str,
) -> tuple[str, ...] | None:
    """:func:`place` on GPUs of ``kind`` alone (``None``: no room for the gang there now).
    Take the GPUs it returns from ``free``."""
    barred = snapshot.barred(job)
    # a kind's free GPUs and its own index, as a FreeIndex with groups keeps them
    if isinstance(free, FreeIndex) and free.group_free is not None:
        if free.group_free.get(kind, 0) < gpus:
            return None  # barred nodes only take from that
        if not barred and free.parts is not None:
            return placement.place(gpus, free.parts[kind])
    get = free.get
    part = {
        n: f for n in snapshot.kind_nodes.get(kind, ()) if n not in barred and (f := get(n, 0)) > 0
    }
    return placement.place(gpus, part) if sum(part.values()) >= gpus else None


JOB_FILE_FIELDS = ("resources.gpu_memory_gb", "resources.gpu_kinds", "resources.exclude_gpu_kinds")
"""Where a job states its GPU memory, its kinds and the kinds it excludes: a job file's fields
(:func:`why_barred` names them; a trace names its own columns)."""


def why_barred(
    snapshot: Snapshot,
    job: QueuedJob | RunningJob,
    fields: tuple[str, str, str] = JOB_FILE_FIELDS,
) -> str:
    """What the job's GPU memory and kinds rule out, for its WAIT reason (``""``: nothing),
    naming where the job said them (``fields``: memory, kinds, excluded kinds)."""
    barred = snapshot.barred(job)
    if not barred:
        return ""
    need = job.gpu_memory_gb
    memory, kinds, exclude = fields
    parts = []
    if need is not None:
        parts.append(f"GPUs with {need:g} GB each ({memory})")
    if job.gpu_kinds:
        parts.append(f"GPUs of kind {' or '.join(job.gpu_kinds)} ({kinds})")
    if job.exclude_kinds:
        parts.append(f"no {', '.join(job.exclude_kinds)} ({exclude})")
    what = " and ".join(parts) or "GPUs of the kind it runs on"
    if len(barred) == len(snapshot.nodes):
        if need is not None and not job.gpu_kinds and not job.exclude_kinds:
            largest = max((n.gpu_memory_gb or 0.0) for n in snapshot.nodes)
            return f"needs {what}; the largest in the pool have {largest:g} GB"
        return f"needs {what}; the pool has none"
    return f"needs {what}: {capacity(snapshot, job)} of the pool's {snapshot.total_gpus} do"
