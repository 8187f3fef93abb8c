"""The immutable view a policy decides on: pool nodes, queued jobs, running jobs, teams.

Policies see only these plain values (no Ray, Redis or torch objects), so the same policy runs in
the live scheduler and in a simulator, and the same snapshot always yields the same decisions.

Every field added after the first version has a default, so a producer that knows only the
first fields (node ids, job class, team, GPUs, order) still builds a valid snapshot: a job then
is rigid (``min_gpus == max_gpus == gpus``), scales linearly, has no deadline and no service, a
running job counts as having made progress (``first_step_at=0.0``), a queued job as never
preempted (``preempted_at=None``), the rounds' interval as unknown (``interval_s=0.0``), and GPU
memory as unknown on a node and not asked for by a job (``gpu_memory_gb=None``), and GPU kinds as
one unlabelled kind that every job allows (``kind=""``), which turns off the rules that read these
fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from policies.history import JobHistory

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
        gpu_memory_gb: memory of each GPU slot (the node's smallest GPU), in GB of 10^9 bytes
            as GPU makers count them; ``None``: unknown, which limits no job (see
            :meth:`holds`).
        kind: the kind of the node's GPUs (``"A100-80GB"``, ``"L4"``; ``orchestrator.kinds``
            names them); ``""``: unlabelled. A gang runs on one kind (see
            :mod:`policies.eligibility`).
        speed: the kind's relative speed per GPU, the same for every node of a kind: what a job
            whose own speed on the kind is not known yet is assumed to get (its
            ``kind_speed``), and the kind's cost when the policy looks for the cheapest kind
            that meets an interactive job's latency.
    """

    node_id: str
    total_gpus: int
    free_gpus: int
    gpu_memory_gb: float | None = None
    kind: str = ""
    speed: float = 1.0

    def holds(self, gpu_memory_gb: float | None) -> bool:
        """Whether a job needing ``gpu_memory_gb`` per GPU may run here: the one rule by
        which GPU memory limits placement (unknown on either side limits nothing)."""
        mine = self.gpu_memory_gb
        return gpu_memory_gb is None or mine is None or mine >= gpu_memory_gb


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

    gpu_memory_gb: float | None
    gpu_kinds: tuple[str, ...]
    exclude_kinds: tuple[str, ...]
    kind_speed: tuple[tuple[str, float], ...]

    def rate(self, gpus: int) -> float:
        """Relative goodput on ``gpus`` GPUs (from ``speedup``; linear when unknown)."""
        return _speedup_at(self.speedup, gpus)

    @property
    def restricted(self) -> bool:
        """Whether the job may not run on every node: it needs GPU memory or names kinds."""
        return self.gpu_memory_gb is not None or bool(self.gpu_kinds or self.exclude_kinds)

    def allows(self, kind: str) -> bool:
        """Whether the job may run on GPUs of ``kind`` (``gpu_kinds``, ``exclude_kinds``)."""
        required = self.gpu_kinds
        return (not required or kind in required) and kind not in self.exclude_kinds

    def speed_on(self, kind: str, prior: float) -> float:
        """The job's speed per GPU on ``kind``: its own (``kind_speed``), else ``prior``, the
        kind's speed (:attr:`NodeView.speed`)."""
        for name, speed in self.kind_speed:
            if name == kind:
                return speed
        return prior


@dataclass(frozen=True)
class QueuedJob(_JobSizes, JobHistory):
    """A job waiting for GPUs, with its history: :class:`~policies.history.JobHistory`'s
    fields, keyword-only (``attained_service``, ``remaining_work``, ``preempted_at``,
    ``restarts``, ``most_gpus``, ``retunes``, ``losses``), read by the policies' ageing,
    restart, growth and churn rules.

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
        speedup: goodput on 1, 2, ... GPUs relative to any fixed unit (index ``n-1`` is ``n``
            GPUs); empty means linear. Beyond the last entry the job gains nothing.
        gpu_memory_gb: memory each of its GPUs must have (``resources.gpu_memory_gb``);
            ``None``: any GPU will do. A policy places it only on nodes that
            :meth:`NodeView.holds` it (see :meth:`Snapshot.too_small`).
        gpu_kinds: the GPU kinds it may run on (``resources.gpu_kinds``); empty: any.
        exclude_kinds: the kinds it must not run on (``resources.exclude_gpu_kinds``).
        kind_speed: its own speed per GPU on each kind, ``(kind, speed)`` in the unit of
            :attr:`NodeView.speed` (measured where it ran, else predicted from one
            measurement scaled by the kinds' speeds: ``orchestrator.kinds``); a kind not in
            it: the kind's own speed. The policy places the job on the kind where it is
            fastest (bulk) or on the cheapest kind it meets its latency on (interactive,
            ``min_speed``): :func:`policies.eligibility.kind_order`.
        min_speed: an interactive job's slowest speed per GPU that still meets its latency
            ceiling (in the same unit); ``0.0``: unknown, which places it on the fastest kind.

    Only a recent ``preempted_at`` matters: ``shared`` holds a bulk job preempted within the
    restart cost, then gives it only the GPUs no other job wants until the longer of the
    round's interval and the restart cost has passed
    (:func:`policies.scheduling.churn.late_window`). ``restarts`` is subtracted from
    the job's age by Pollux's restart penalty; ``most_gpus`` with what a running job holds is
    the largest allocation it has been measured on (Pollux grows a job to at most twice that).
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
    speedup: tuple[float, ...] = ()
    gpu_memory_gb: float | None = None
    gpu_kinds: tuple[str, ...] = ()
    exclude_kinds: tuple[str, ...] = ()
    kind_speed: tuple[tuple[str, float], ...] = ()
    min_speed: float = 0.0


@dataclass(frozen=True)
class RunningJob(_JobSizes, JobHistory):
    """A job holding GPUs (placed or running), with its history as for :class:`QueuedJob`
    (its ended runs only: ``attained_service`` does not count the current run, ``most_gpus``
    not the GPUs it holds now).

    Attributes:
        job_id: the store's job id.
        job_class: ``"bulk"`` or ``"interactive"``.
        team: the submitting team.
        nodes: the node id of each GPU the job holds.
        seq: submission order.
        submitted_at: submission time.
        started_at: when the job got its current GPUs (start, resume or resize).
        checkpoint_at: when it last saved a checkpoint; work since then is lost on preemption
            (``math.inf``: a stop loses nothing, as for the simulator's jobs that checkpoint
            continuously; see :func:`policies.preemption.lost_work`).
        min_gpus, max_gpus, deadline, speedup, gpu_kinds, exclude_kinds, kind_speed,
            min_speed: as for :class:`QueuedJob`.
        first_step_at: when the current run (since ``started_at``: its start, resume or
            resize) did its first training step, or a time after ``now`` when that step is
            still to come; ``None``: it has done no step yet. The default ``0.0`` reads as
            "has stepped", so a producer that does not track steps changes nothing. A run with
            no step yet is never a victim (preempted or shrunk) for another bulk job: that
            would throw away its whole start-up and gain nothing (see :meth:`stepped`).
        urgent: the SLA guard measured it short of its throughput floor or deadline: an
            elastic job the policy should grow first when GPUs are spare.
        want_gpus: a service's replica count the SLA guard asks for (issue 24:
            ``policies.replicas``), within its GPU range and its team's quota; ``0``: none
            asked, it keeps what it holds. A policy that honours it resizes the service to
            exactly that many GPUs as interactive work (``shared``: first, making room from
            bulk jobs as for an interactive start); the others leave it as it is.
        tuning: the run is the job's tuning gang (its trials measure the GPUs it got): it may
            be preempted, never moved to another GPU kind
            (:func:`policies.scheduling.kind_moves.kind_moves`).
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
    speedup: tuple[float, ...] = ()
    first_step_at: float | None = 0.0
    gpu_memory_gb: float | None = None  # as for QueuedJob: a grow takes only such nodes
    urgent: bool = False
    want_gpus: int = 0
    # as for QueuedJob; a grow stays on the kind it runs on (Snapshot.barred)
    gpu_kinds: tuple[str, ...] = ()
    exclude_kinds: tuple[str, ...] = ()
    kind_speed: tuple[tuple[str, float], ...] = ()
    min_speed: float = 0.0
    tuning: bool = False

    @property
    def gpus(self) -> int:
        """GPUs the job holds."""
        return len(self.nodes)

    def stepped(self, now: float) -> bool:
        """Whether the current run has done a training step by ``now`` (see ``first_step_at``)."""
        at = self.first_step_at
        return at is not None and not at > now


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
        interval_s: seconds since the previous round's ``now`` (the gap as it was, not the
            nominal interval: a live round may start late; ``0.0``: unknown, which turns off the
            rules about the previous round, e.g. ``shared``'s hold after a preemption).
        declined: the deadline jobs the admission plan declined (issue 26; filled by the
            admission desk, live and simulated, see ``policies.scheduling.admission``): a
            policy that binds the verdict (``binds_admission``) runs them best effort.
    """

    nodes: tuple[NodeView, ...]
    queue: tuple[QueuedJob, ...] = ()
    running: tuple[RunningJob, ...] = ()
    now: float = 0.0
    seed: int = 0
    teams: tuple[TeamView, ...] = ()
    restart_cost_s: float = 30.0
    interval_s: float = 0.0
    declined: frozenset[str] = frozenset()
    total_gpus: int = field(init=False)

    _free: dict[str, int] = field(init=False, repr=False, compare=False)
    # too_small's and barred's answers, per requirement: asked once per job, every round
    _small: dict[float, frozenset[str]] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )
    _barred: dict[tuple[object, ...], frozenset[str]] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )
    # answers per requirement of policies.eligibility (kind order, capacity): asked per job
    memo: dict[tuple[object, ...], object] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "total_gpus", sum(n.total_gpus for n in self.nodes))
        # read by the policy and by the decision check every round: built once per snapshot
        # (a comparison, not ``max(0, free)``: the call took most of a simulated round's
        # snapshot, for the 250 nodes of a 2,000-GPU pool)
        free = {n.node_id: f if (f := n.free_gpus) > 0 else 0 for n in self.nodes}
        object.__setattr__(self, "_free", free)

    def free(self) -> dict[str, int]:
        """Free GPUs per node id, in the pool's node order (a fresh dict: the caller's to
        change)."""
        return dict(self._free)

    def too_small(self, gpu_memory_gb: float | None) -> frozenset[str]:
        """Nodes whose GPUs have less memory than ``gpu_memory_gb``: no GPU of a job needing
        that much may be placed there (empty for ``None``; see :meth:`NodeView.holds`)."""
        if gpu_memory_gb is None:
            return frozenset()
        small = self._small.get(gpu_memory_gb)
        if small is None:
            small = frozenset(n.node_id for n in self.nodes if not n.holds(gpu_memory_gb))
            self._small[gpu_memory_gb] = small
        return small

    # The pool's kinds, read only by rounds that place a gang or a job that names kinds: made
    # on first use (a simulated round that places nothing pays nothing for them).

    @cached_property
    def kinds(self) -> dict[str, float]:
        """The pool's GPU kinds and their speeds, fastest first (one entry, often ``""``: a
        pool of one kind places as a pool without kinds)."""
        kinds: dict[str, float] = {}
        for n in self.nodes:
            kinds.setdefault(n.kind, n.speed)
        return dict(sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))

    @cached_property
    def kind_map(self) -> dict[str, str]:
        """Each node's kind, by node id."""
        return {n.node_id: n.kind for n in self.nodes}

    @cached_property
    def kind_nodes(self) -> dict[str, tuple[str, ...]]:
        """Each kind's node ids, in pool order."""
        out: dict[str, list[str]] = {}
        for n in self.nodes:
            out.setdefault(n.kind, []).append(n.node_id)
        return {k: tuple(v) for k, v in out.items()}

    @cached_property
    def kind_gpus(self) -> dict[str, int]:
        """Each kind's GPUs."""
        out: dict[str, int] = {}
        for n in self.nodes:
            out[n.kind] = out.get(n.kind, 0) + n.total_gpus
        return out

    @cached_property
    def mixed(self) -> bool:
        """Whether the pool has GPUs of more than one kind (then a gang takes one kind)."""
        nodes = self.nodes
        first = nodes[0].kind if nodes else ""
        return any(n.kind != first for n in nodes)

    def kind_of(self, node_id: str) -> str:
        """The kind of a node's GPUs (``""``: unlabelled or not in the pool)."""
        return self.kind_map.get(node_id, "")

    def barred(self, job: QueuedJob | RunningJob) -> frozenset[str]:
        """Nodes none of the job's GPUs may be placed on: too small for its
        ``gpu_memory_gb`` (:meth:`too_small`) or of a kind it does not allow
        (:meth:`QueuedJob.allows`). Empty for a job that any node takes."""
        if not job.gpu_kinds and not job.exclude_kinds:
            return self.too_small(job.gpu_memory_gb)
        key = (job.gpu_memory_gb, job.gpu_kinds, job.exclude_kinds)
        out = self._barred.get(key)
        if out is None:
            small = self.too_small(job.gpu_memory_gb)
            out = frozenset(
                n.node_id for n in self.nodes if n.node_id in small or not job.allows(n.kind)
            )
            self._barred[key] = out
        return out
