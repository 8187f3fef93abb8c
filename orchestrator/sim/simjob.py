"""A simulated job's state as the simulator keeps it (:class:`SimJob`), and its record."""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.sim.metrics import SimOutcome
from orchestrator.sim.models import JobModel
from orchestrator.sim.trace import TraceJob
from policies import JobHistory, QueuedJob, RunningJob
from policies.history import NEVER_RUN

WAITING, QUEUED, RUNNING, DONE = range(4)
"""A job's states: not submitted yet, queued, holding GPUs, completed."""


@dataclass(eq=False)
class SimJob:
    """One job of a run: its trace row, model and what happened to it so far."""

    spec: TraceJob
    seq: int
    model: JobModel
    state: int = WAITING
    nodes: tuple[str, ...] = ()
    placement: tuple[int, ...] = ()
    restart_left: float = 0.0
    # a service resized in place: for ``warm_left`` seconds only ``warm_replicas`` of its
    # replicas serve (the new ones load their model; see ``orchestrator.sim.services``)
    warm_left: float = 0.0
    warm_replicas: int = 0
    start_s: float = 0.0  # the current run's start-up (the restart cost, or measured)
    started_at: float = 0.0
    # the current run's GPUs as a service resized in place changes them (live's ledger):
    # GPU-seconds before ``run_since`` (its last resize), the most it held at once
    run_gpu_s: float = 0.0
    run_since: float = 0.0
    run_most_gpus: int = 0
    since_ckpt: float = 0.0
    ckpt: tuple[float, int] = (0.0, 0)
    history: JobHistory = NEVER_RUN  # advanced as live, by ``policies.history.advance``
    first_start: float | None = None
    queued_since: float = 0.0  # submission, then the last preemption
    waits: list[float] = field(default_factory=list)  # every wait that ended with a start
    wait_reason: str = ""  # the policy's last WAIT reason
    completed_at: float | None = None
    preemptions: int = 0
    resizes: int = 0
    lost_gpu_s: float = 0.0
    preempt_lost_gpu_s: float = 0.0
    view: QueuedJob | RunningJob | None = None
    speedup_key: object = None
    speedup: tuple[float, ...] = ()
    speedup_final: bool = False  # ``speedup`` cannot change any more: no need to ask again
    lo: int = 0  # ``spec.lo``, ``spec.team`` and ``spec.checkpoint``, read every round
    team: str = ""
    checkpoint_s: float = 0.0
    # ``spec``'s kinds as the policy's fields, and the speed on the GPUs it holds (work per
    # second at speed 1; set with its nodes, see ``DecisionApplier``)
    gpu_kinds: tuple[str, ...] = ()
    exclude_kinds: tuple[str, ...] = ()
    kind_speed: tuple[tuple[str, float], ...] = ()
    speed: float = 1.0


def placement_of(nodes: tuple[str, ...]) -> tuple[int, ...]:
    """GPUs per node in allocation order (consecutive runs of the same node id)."""
    out: list[int] = []
    prev = None
    for n in nodes:
        if n == prev:
            out[-1] += 1
        else:
            out.append(1)
            prev = n
    return tuple(out)


def record_of(job: SimJob, now: float) -> SimOutcome:
    """The job's record at the end of a run at ``now``."""
    s = job.spec
    waits = job.waits
    if job.state == QUEUED and job.first_start is not None:  # preempted, not resumed
        waits = [*waits, now - job.queued_since]
    return SimOutcome(
        name=s.name,
        job_class=s.job_class,
        team=s.team,
        gpus=s.gpus,
        submit_time=s.submit_time,
        first_start=job.first_start,
        completed_at=job.completed_at,
        deadline=None if s.deadline is None else s.submit_time + s.deadline,
        wait_target=s.wait_target,
        preemptions=job.preemptions,
        resizes=job.resizes,
        lost_gpu_s=job.lost_gpu_s,
        waits=tuple(waits),
        preempt_lost_gpu_s=job.preempt_lost_gpu_s,
    )
