"""The immutable view a policy decides on: pool nodes, queued jobs, running jobs, teams.

Policies see only these plain values (no Ray, Redis or torch objects), so the same policy runs in
the live scheduler and in a simulator, and the same snapshot always yields the same decisions.

Every field added after the first version has a default, so a producer that knows only the
first fields (node ids, job class, team, GPUs, order) still builds a valid snapshot: a job then
is rigid (``min_gpus == max_gpus == gpus``), scales linearly, has no deadline and no service.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

INTERACTIVE = "interactive"
BULK = "bulk"
DEFAULT_WAIT_TARGET_S = 60.0
"""Start-wait target of an interactive job when its spec gives none (seconds)."""


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
class TeamView:
    """One team's share of the pool (plain values from the team config).

    Attributes:
        name: the team's name, as jobs give it.
        weight: relative weight in fair sharing beyond guarantees (> 0).
        guaranteed_gpus: GPUs the team gets whenever it has demand for them.
        max_gpus: a cap on what the team may hold (borrowing included); 0 means no cap.
    """

    name: str
    weight: float = 1.0
    guaranteed_gpus: int = 0
    max_gpus: int = 0


def _speedup_at(speedup: tuple[float, ...], gpus: int) -> float:
    if gpus <= 0:
        return 0.0
    if not speedup:
        return float(gpus)
    if gpus <= len(speedup):
        return speedup[gpus - 1]
    return speedup[-1]


class _JobSizes:
    """What queued and running jobs derive alike from their GPU fields (see :class:`QueuedJob`)."""

    job_class: str
    min_gpus: int
    max_gpus: int
    speedup: tuple[float, ...]

    if TYPE_CHECKING:  # a field of QueuedJob, a property of RunningJob

        @property
        def gpus(self) -> int: ...

    @property
    def lo(self) -> int:
        """Fewest GPUs the job can run on."""
        return self.min_gpus or self.gpus

    @property
    def hi(self) -> int:
        """Most GPUs the job can use."""
        return max(self.max_gpus or self.gpus, self.lo)

    @property
    def interactive(self) -> bool:
        """Whether the job is interactive (starts at once, never preempted)."""
        return self.job_class == INTERACTIVE

    def rate(self, gpus: int) -> float:
        """Relative goodput on ``gpus`` GPUs (from ``speedup``; linear when unknown)."""
        return _speedup_at(self.speedup, gpus)


@dataclass(frozen=True)
class QueuedJob(_JobSizes):
    """A job waiting for GPUs.

    Attributes:
        job_id: the store's job id.
        job_class: ``"bulk"`` or ``"interactive"``.
        team: the submitting team.
        gpus: GPUs the job asks for, all at once (gang); an elastic job's preferred size.
        seq: submission order, increasing.
        submitted_at: submission time (seconds, same clock as ``Snapshot.now``).
        min_gpus: fewest GPUs an elastic job runs on (0: same as ``gpus``).
        max_gpus: most GPUs an elastic job can use (0: same as ``gpus``).
        deadline: absolute time a bulk job's work should be done by (``None``: none).
        wait_target_s: an interactive job's start-wait target (seconds after submission).
        attained_service: GPU-seconds the job has held GPUs so far (over all its runs).
        remaining_work: estimated seconds of work left on ``gpus`` GPUs (``None``: unknown).
        speedup: goodput on 1, 2, ... GPUs relative to any fixed unit (index ``n-1`` is ``n``
            GPUs); empty means linear. Beyond the last entry the job gains nothing.
    """

    job_id: str
    job_class: str
    team: str
    gpus: int
    seq: int
    submitted_at: float
    min_gpus: int = 0
    max_gpus: int = 0
    deadline: float | None = None
    wait_target_s: float = DEFAULT_WAIT_TARGET_S
    attained_service: float = 0.0
    remaining_work: float | None = None
    speedup: tuple[float, ...] = ()


@dataclass(frozen=True)
class RunningJob(_JobSizes):
    """A job holding GPUs (placed or running).

    Attributes:
        job_id: the store's job id.
        job_class: ``"bulk"`` or ``"interactive"``.
        team: the submitting team.
        nodes: the node id of each GPU the job holds.
        seq: submission order.
        submitted_at: submission time.
        started_at: when the job got its current GPUs (start, resume or resize).
        checkpoint_at: when it last saved a checkpoint; work since then is lost on preemption.
        min_gpus, max_gpus, deadline, attained_service, remaining_work, speedup: as for
            :class:`QueuedJob`.
    """

    job_id: str
    job_class: str
    team: str
    nodes: tuple[str, ...]
    seq: int = 0
    submitted_at: float = 0.0
    started_at: float = 0.0
    checkpoint_at: float = 0.0
    min_gpus: int = 0
    max_gpus: int = 0
    deadline: float | None = None
    attained_service: float = 0.0
    remaining_work: float | None = None
    speedup: tuple[float, ...] = ()

    @property
    def gpus(self) -> int:
        """GPUs the job holds."""
        return len(self.nodes)


@dataclass(frozen=True)
class Snapshot:
    """Everything a policy may look at for one scheduling round.

    Attributes:
        nodes: the pool, in a stable order.
        queue: waiting jobs, in any order (the queue policy orders them).
        running: jobs holding GPUs.
        now: the clock of the round (wall clock live, simulated time in a simulator).
        seed: for policies that break ties randomly; same snapshot and seed, same decisions.
        teams: the team config (empty: every team is equal and has no guarantee).
        restart_cost_s: seconds a job loses when it is started, resized or resumed.
    """

    nodes: tuple[NodeView, ...]
    queue: tuple[QueuedJob, ...] = ()
    running: tuple[RunningJob, ...] = ()
    now: float = 0.0
    seed: int = 0
    teams: tuple[TeamView, ...] = ()
    restart_cost_s: float = 30.0
    total_gpus: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "total_gpus", sum(n.total_gpus for n in self.nodes))

    def free(self) -> dict[str, int]:
        """Free GPUs per node id, in the pool's node order."""
        return {n.node_id: max(0, n.free_gpus) for n in self.nodes}
