"""The immutable view a policy decides on: pool nodes, queued jobs, running jobs.

Policies see only these plain values (no Ray, Redis or torch objects), so the same policy runs in
the live scheduler and in a simulator, and the same snapshot always yields the same decisions.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class NodeView:
    """One node of the pool.

    Attributes:
        node_id: the pool's id for the node (Ray's node id in the live scheduler).
        total_gpus: GPU slots the node has (real or virtual).
        free_gpus: slots not held by any job right now.
    """

    node_id: str
    total_gpus: int
    free_gpus: int


@dataclass(frozen=True)
class QueuedJob:
    """A job waiting for GPUs.

    Attributes:
        job_id: the store's job id.
        job_class: ``"bulk"`` or ``"interactive"``.
        team: the submitting team.
        gpus: GPUs the job needs, all at once (gang).
        seq: submission order, increasing.
        submitted_at: submission time (seconds, same clock as ``Snapshot.now``).
    """

    job_id: str
    job_class: str
    team: str
    gpus: int
    seq: int
    submitted_at: float


@dataclass(frozen=True)
class RunningJob:
    """A job holding GPUs (placed or running).

    Attributes:
        job_id: the store's job id.
        job_class: ``"bulk"`` or ``"interactive"``.
        team: the submitting team.
        nodes: the node id of each GPU the job holds.
    """

    job_id: str
    job_class: str
    team: str
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class Snapshot:
    """Everything a policy may look at for one scheduling round.

    Attributes:
        nodes: the pool, in a stable order.
        queue: waiting jobs, in any order (the queue policy orders them).
        running: jobs holding GPUs.
        now: the clock of the round (wall clock live, simulated time in a simulator).
        seed: for policies that break ties randomly; same snapshot and seed, same decisions.
    """

    nodes: tuple[NodeView, ...]
    queue: tuple[QueuedJob, ...] = ()
    running: tuple[RunningJob, ...] = ()
    now: float = 0.0
    seed: int = 0
    total_gpus: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "total_gpus", sum(n.total_gpus for n in self.nodes))
