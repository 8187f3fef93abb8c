"""The pool view: what the scheduler last saw of the pool, for ``orch pool`` and the CLI.

``{ns}:pool`` is one JSON document (nodes, GPUs used, jobs, team usage) that the scheduler
republishes with a time-to-live of its lease: when no scheduler runs, it is gone, and its
absence is how the CLI tells that no scheduler is up.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

from orchestrator.spec import JobSpec
from orchestrator.store.keys import KeyFamily
from policies import NodeView, QueuedJob, Snapshot
from policies.eligibility import capacity

__all__ = ["HISTORY_LEN", "PoolHistoryStore", "PoolViewStore", "pool_problem", "pool_snapshot"]

HISTORY_LEN = 8640
"""Samples of the pool's use kept (a day at the scheduler's one per 10 s)."""


class PoolViewStore(KeyFamily):
    """The published pool view of one namespace."""

    def publish(self, view: Mapping[str, Any], ttl_ms: int) -> None:
        """Replace the view; it expires after ``ttl_ms`` unless published again."""
        self._client.set(self._keys.pool_view, json.dumps(view), px=ttl_ms)

    def read(self) -> dict[str, Any] | None:
        """The view last published, or ``None`` when none is live (no scheduler runs)."""
        raw = cast(str | None, self._client.get(self._keys.pool_view))
        return json.loads(raw) if raw else None


class PoolHistoryStore(KeyFamily):
    """The pool's use over time: one sample per interval the scheduler chooses, the newest
    :data:`HISTORY_LEN` kept (a capped stream: its memory is bounded whatever the uptime)."""

    def append(self, at: float, gpus: int, used: int, teams: Mapping[str, int]) -> None:
        """Record that at ``at`` (epoch seconds) ``used`` of ``gpus`` were held, per team."""
        fields = {"at": f"{at:.3f}", "gpus": gpus, "used": used, "teams": json.dumps(teams)}
        self._client.xadd(
            self._keys.pool_history,
            fields,  # type: ignore[arg-type]
            maxlen=HISTORY_LEN,
            approximate=True,
        )

    def read(self, count: int = HISTORY_LEN) -> list[dict[str, Any]]:
        """The newest ``count`` samples, oldest first: ``{at, gpus, used, teams}``."""
        entries = cast(
            list[tuple[str, dict[str, str]]],
            self._client.xrevrange(self._keys.pool_history, count=count),
        )
        return [
            {
                "at": float(f["at"]),
                "gpus": int(f["gpus"]),
                "used": int(f["used"]),
                "teams": json.loads(f["teams"]),
            }
            for _, f in reversed(entries)
        ]


def pool_snapshot(nodes: Sequence[Mapping[str, Any]]) -> Snapshot | None:
    """The published pool's ``nodes`` as a policy's snapshot, once for a batch of submissions
    (``None``: the pool is not known)."""
    if not nodes:
        return None
    views = tuple(
        NodeView(
            n["node_id"],
            int(n["gpus"]),
            0,
            n.get("gpu_memory_gb"),
            str(n.get("kind") or ""),
            float(n.get("speed") or 1.0),
        )
        for n in nodes
    )
    return Snapshot(views)


def pool_problem(spec: JobSpec, snapshot: Snapshot | None) -> str:
    """Why the published pool (:func:`pool_snapshot`) can never run ``spec`` for its GPU
    memory, its kinds or, in a pool of several kinds, its size (``""``: it can, or the pool is
    not known), by the placement rules themselves (:meth:`policies.Snapshot.barred`,
    :func:`policies.eligibility.capacity`: a gang runs on one kind)."""
    if snapshot is None:
        return ""
    res = spec.resources
    if hint := _kind_case_hint(res.gpu_kinds, res.exclude_gpu_kinds, snapshot.kinds):
        return hint
    job = QueuedJob(
        spec.name,
        spec.job_class,
        spec.team,
        res.gpus.min,
        0,
        0.0,
        gpu_memory_gb=res.gpu_memory_gb,
        gpu_kinds=tuple(res.gpu_kinds),
        exclude_kinds=tuple(res.exclude_gpu_kinds),
    )
    ruled_out = bool(snapshot.barred(job))  # nodes its memory or kinds rule out
    if not ruled_out and not snapshot.mixed:
        return ""  # a pool of one kind, all of it usable: a larger job waits (nodes may join)
    fit = capacity(snapshot, job)
    gpus = res.gpus.min
    if fit >= gpus:
        return ""
    need = res.gpu_memory_gb
    kinds = ", ".join(
        f"{k or '(unnamed)'} x{snapshot.kind_gpus[k]}" for k in sorted(snapshot.kinds)
    )
    if not ruled_out:
        return (
            f"resources.gpus asks for at least {gpus} GPUs, but a job's GPUs are all of one "
            f"kind and the pool's largest kind has {fit} (its kinds: {kinds}): ask for at most "
            f"{fit}"
        )
    if fit == 0 and not res.gpu_kinds and not res.exclude_gpu_kinds and need is not None:
        largest = max(v.gpu_memory_gb or 0.0 for v in snapshot.nodes)
        return (
            f"resources.gpu_memory_gb must be at most {largest:g} (the pool's largest GPUs), "
            f"got {need:g}"
        )
    if fit == 0:
        return (
            "resources.gpu_kinds / exclude_gpu_kinds"
            + ("" if need is None else " with resources.gpu_memory_gb")
            + f" leave no GPU of the pool; its kinds: {kinds}"
        )
    if need is not None and not snapshot.mixed:
        return (
            f"resources.gpu_memory_gb is {need:g}, which {fit} GPU(s) of the pool have; "
            f"the job needs at least {gpus}"
        )
    what = "resources.gpu_memory_gb" if need is not None else "resources.gpu_kinds"
    return (
        f"{what} leaves {fit} GPU(s) of one kind for the job (the pool's kinds: {kinds}); "
        f"the job needs at least {gpus}"
    )


def _kind_case_hint(
    wanted: Sequence[str], excluded: Sequence[str], kinds: Mapping[str, float]
) -> str:
    """A kind the job names that the pool has under another case (``l4`` for ``L4``): a kind's
    name is matched exactly, so such a name would silently match no GPU (``""``: none)."""
    by_lower = {k.lower(): k for k in kinds}
    for field, names in (("gpu_kinds", wanted), ("exclude_gpu_kinds", excluded)):
        for name in names:
            other = by_lower.get(name.lower())
            if name not in kinds and other is not None:
                return (
                    f"resources.{field} names {name}, which no node has (kind names match "
                    f"exactly): did you mean {other}?"
                )
    return ""
