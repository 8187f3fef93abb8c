"""A job's GPU memory in scheduling: the nodes it may take, its reachable pool, why it waits.

The rule itself is :meth:`~policies.snapshot.NodeView.holds` (applied to a round's nodes by
:meth:`~policies.snapshot.Snapshot.too_small`); every policy that chooses nodes goes through
:func:`usable` (or passes ``too_small`` to :func:`~policies.scheduling.resize.grow_gpus`), and
sizes a job against :func:`capacity` rather than the whole pool, so a job never counts on, nor
takes, GPUs that are too small for it. A job that needs no memory sees the pool unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping

from policies.placement import without
from policies.snapshot import QueuedJob, RunningJob, Snapshot

__all__ = ["capacity", "memory_note", "usable"]


def usable(
    free: Mapping[str, int], snapshot: Snapshot, job: QueuedJob | RunningJob
) -> Mapping[str, int]:
    """``free`` on the nodes whose GPUs hold the job's ``gpu_memory_gb`` (``free`` itself when
    that is every node): what a placement may take for it. Take the GPUs it returns from
    ``free``."""
    return without(free, snapshot.too_small(job.gpu_memory_gb))


def capacity(snapshot: Snapshot, job: QueuedJob | RunningJob) -> int:
    """GPUs in the pool that the job could ever run on (all of them when no node is too
    small for it)."""
    small = snapshot.too_small(job.gpu_memory_gb)
    if not small:
        return snapshot.total_gpus
    return sum(n.total_gpus for n in snapshot.nodes if n.node_id not in small)


def memory_note(snapshot: Snapshot, job: QueuedJob | RunningJob) -> str:
    """What the job's GPU memory rules out, for its WAIT reason (``""``: nothing)."""
    need = job.gpu_memory_gb
    small = snapshot.too_small(need)
    if not small:
        return ""
    what = f"GPUs with {need:g} GB each (resources.gpu_memory_gb)"
    if len(small) == len(snapshot.nodes):
        largest = max((n.gpu_memory_gb or 0.0) for n in snapshot.nodes)
        return f"needs {what}; the largest in the pool have {largest:g} GB"
    return f"needs {what}: {capacity(snapshot, job)} of the pool's {snapshot.total_gpus} do"
