"""One snapshot builder for the live loop and the simulator.

A policy reads a :class:`~policies.Snapshot`; both worlds build it here, from the same plain
facts, so every field a policy reads means the same thing in both: the live loop fills
:class:`JobFacts` and :class:`RunFacts` from the store and its runs, the simulator from its
trace and simulated clock. The meanings that are easy to get subtly wrong live here once:
a deadline is absolute (submission + ``deadline_s``); a job's history
(:class:`~policies.history.JobHistory`) is its ended runs', advanced by one rule in both
worlds (``attained_service`` counts ended runs only: the policy adds the current one from
``started_at``); work since the later of the run's start and its last checkpoint is what a
preemption loses.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from policies import JobHistory, NodeView, QueuedJob, RunningJob, Snapshot, TeamView
from policies.history import NEVER_RUN
from policies.snapshot import DEFAULT_WAIT_TARGET_S

__all__ = ["JobFacts", "RunFacts", "build_snapshot", "queued_view", "running_view"]


@dataclass(frozen=True)
class JobFacts:
    """What is known about a job whatever its state (plain values).

    Attributes:
        job_id, job_class, team: identity.
        gpus: its requested size (an elastic job's preferred size).
        seq: submission order; submitted_at: submission time (the round clock's).
        min_gpus, max_gpus: an elastic job's usable range (0: rigid, ``gpus``).
        deadline_s: bulk work due this long after submission (``None``: no deadline).
        wait_target_s: an interactive job's start-wait target.
        speedup: goodput on 1, 2, ... GPUs (empty: linear).
        gpu_memory_gb: memory each of its GPUs must have (``None``: any will do).
        history: what its ended runs left (its ``remaining_work`` the freshest estimate:
            a running job's from its progress reports, the simulator's from its model).
    """

    job_id: str
    job_class: str
    team: str
    gpus: int
    seq: int
    submitted_at: float
    min_gpus: int = 0
    max_gpus: int = 0
    deadline_s: float | None = None
    wait_target_s: float = DEFAULT_WAIT_TARGET_S
    speedup: tuple[float, ...] = ()
    gpu_memory_gb: float | None = None
    history: JobHistory = NEVER_RUN

    @property
    def deadline(self) -> float | None:
        """The absolute time the work is due."""
        return None if self.deadline_s is None else self.submitted_at + self.deadline_s


@dataclass(frozen=True)
class RunFacts:
    """What is known about a job's current run.

    Attributes:
        nodes: the node of each GPU it holds (a resizing run: the GPUs it is moving to).
        started_at: when it got these GPUs (start, resume or resize).
        checkpoint_at: when it last wrote a checkpoint (``None``: not since it started).
        first_step_at: when it did its first step (``None``: none yet).
        urgent: the SLA guard found it short of its throughput floor or deadline (live, from
            its measured window; the simulator's jobs run at their modelled rate and carry no
            floor, so it never sets it).
        want_gpus: the replicas the SLA guard asks a service to run (0: none asked; live,
            from its measured window: the simulator models no request latency, so it never
            sets it).
    """

    nodes: tuple[str, ...]
    started_at: float
    checkpoint_at: float | None = None
    first_step_at: float | None = None
    urgent: bool = False
    want_gpus: int = 0


def queued_view(job: JobFacts) -> QueuedJob:
    """A waiting job as a policy sees it."""
    return QueuedJob(
        job.job_id,
        job.job_class,
        job.team,
        job.gpus,
        job.seq,
        job.submitted_at,
        min_gpus=job.min_gpus,
        max_gpus=job.max_gpus,
        deadline=job.deadline,
        wait_target_s=job.wait_target_s,
        speedup=job.speedup,
        gpu_memory_gb=job.gpu_memory_gb,
        **vars(job.history),  # the same names: the record's fields are the view's
    )


def running_view(job: JobFacts, run: RunFacts) -> RunningJob:
    """A job holding GPUs as a policy sees it."""
    ckpt = run.checkpoint_at
    return RunningJob(
        job.job_id,
        job.job_class,
        job.team,
        run.nodes,
        seq=job.seq,
        submitted_at=job.submitted_at,
        started_at=run.started_at,
        checkpoint_at=run.started_at if ckpt is None or ckpt < run.started_at else ckpt,
        min_gpus=job.min_gpus,
        max_gpus=job.max_gpus,
        deadline=job.deadline,
        speedup=job.speedup,
        first_step_at=run.first_step_at,
        gpu_memory_gb=job.gpu_memory_gb,
        urgent=run.urgent,
        want_gpus=run.want_gpus,
        **vars(job.history),  # the same names: the record's fields are the view's
    )


def build_snapshot(
    nodes: Iterable[NodeView],
    queue: Iterable[QueuedJob],
    running: Iterable[RunningJob],
    *,
    now: float,
    teams: Iterable[TeamView] = (),
    seed: int = 0,
    restart_cost_s: float,
    interval_s: float,
) -> Snapshot:
    """The snapshot of one round (the one constructor both worlds call)."""
    return Snapshot(
        nodes=tuple(nodes),
        queue=tuple(queue),
        running=tuple(running),
        now=now,
        seed=seed,
        teams=tuple(teams),
        restart_cost_s=restart_cost_s,
        interval_s=interval_s,
    )
