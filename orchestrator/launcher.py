"""Runs one job's gang on Ray: placement group, one worker actor per GPU, outcome.

Why not Ray Train's ``TorchTrainer``: it creates and owns its own placement group and its own
failure handling. The scheduler must own the placement group itself (the policy picks the nodes,
preemption removes the group, a resize is a restart on a new group), and a second controller
under it would make two layers decide about the same GPUs. The harness sets up
``torch.distributed`` itself (see ``workers.distributed``), which is all Ray Train would add here.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.spec import JobSpec

log = logging.getLogger(__name__)


# torch.distributed's own error types: a collective failed because of a peer or the network.
DISTRIBUTED_ERRORS = frozenset(
    {"DistError", "DistBackendError", "DistNetworkError", "DistStoreError"}
)


def start_workers(
    pg: Any,
    job_id: str,
    *,
    num_threads: int | None,
    reporter_factory: Callable[[], Callable[[dict[str, Any]], None]] | None = None,
) -> list[Any]:
    """One :class:`workers.actor.WorkerActor` per bundle of ``pg``, rank ``i`` in bundle ``i``
    (a job's gang, or a tuning gang); only rank 0 gets the report sink."""
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from workers.actor import WorkerActor

    world = len(pg.bundle_specs)
    remote_cls = ray.remote(WorkerActor)
    return [
        remote_cls.options(
            num_cpus=0,
            num_gpus=1,
            max_concurrency=2,  # request_stop runs while run is busy
            max_restarts=0,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                pg, placement_group_bundle_index=rank
            ),
        ).remote(
            job_id=job_id,
            rank=rank,
            world_size=world,
            reporter_factory=reporter_factory if rank == 0 else None,
            num_threads=num_threads,
        )
        for rank in range(world)
    ]


class OutcomeKind(enum.Enum):
    """How a run ended."""

    FINISHED = "finished"  # the harness completed its steps
    STOPPED = "stopped"  # stopped on request (cancel); a checkpoint was written
    FAILED = "failed"  # the workload or harness raised: do not retry
    LOST = "lost"  # a worker or node died, or placement timed out: retry from checkpoint


@dataclass
class Outcome:
    """What the scheduler needs to record when a run ends."""

    kind: OutcomeKind
    message: str = ""
    result: dict[str, Any] = field(default_factory=dict)


def harness_config(spec: JobSpec) -> dict[str, Any]:
    """The worker harness configuration for a job (a plain dict: it crosses to Ray workers)."""
    run = spec.run
    tp = spec.sla.throughput
    cfg: dict[str, Any] = {
        "workload": spec.workload.ref,
        "workload_args": dict(spec.workload.args),
        "micro_batch": run.micro_batch,
        "grad_accum": run.grad_accum,
        "precision": run.precision,
        "activation_checkpointing": run.activation_checkpointing,
        "compile": run.compile,
        "sharding": run.sharding,
        "steps": run.steps,
        "duration_s": run.duration_s,
        "warmup_steps": run.warmup_steps,
        "checkpoint_every": run.checkpoint_every,
        "seed": run.seed,
    }
    if tp is not None and tp.work_samples is not None:
        cfg["steps"] = spec.steps_for()
    elif tp is not None and tp.work_tokens is not None:
        cfg["work_tokens"] = tp.work_tokens
    return cfg


def _failure_message(err: BaseException) -> str:
    """The user-facing line of a worker failure: the original exception, not Ray's wrapper."""
    cause = getattr(err, "cause", None)
    if isinstance(cause, BaseException):
        err = cause
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:500]


class JobRun(threading.Thread):
    """One attempt at running a job on the nodes the policy chose.

    The thread blocks on Ray; the scheduler loop stays responsive and reads :attr:`outcome` once
    the thread ends. ``on_running`` is called when the workers have started (the scheduler marks
    the job running); returning ``False`` means the job was cancelled meanwhile.

    Args:
        job_id: the job.
        spec: its validated spec.
        nodes: the node id of each GPU (from the policy's START decision).
        strategy: the Ray placement-group strategy.
        checkpoint_dir: where this job's checkpoints go (kept across attempts).
        reporter_factory: picklable; builds rank 0's metrics sink on the worker.
        num_threads: torch CPU threads per worker (1 on virtual GPU slots; ``None`` = default).
        placement_timeout_s: give the GPUs back and retry later if Ray cannot place the gang.
        stop_grace_s: how long a stop request waits for the checkpoint before killing.
    """

    def __init__(
        self,
        job_id: str,
        spec: JobSpec,
        nodes: tuple[str, ...],
        strategy: str,
        checkpoint_dir: Path,
        reporter_factory: Callable[[], Callable[[dict[str, Any]], None]] | None,
        on_running: Callable[[], bool],
        *,
        num_threads: int | None = None,
        placement_timeout_s: float = 60.0,
        stop_grace_s: float = 30.0,
    ) -> None:
        super().__init__(name=f"job-{job_id}", daemon=True)
        self.job_id = job_id
        self.spec = spec
        self.nodes = nodes
        self.strategy = strategy
        self.checkpoint_dir = checkpoint_dir
        self.reporter_factory = reporter_factory
        self.num_threads = num_threads
        self.on_running = on_running
        self.placement_timeout_s = placement_timeout_s
        self.stop_grace_s = stop_grace_s
        self.outcome: Outcome | None = None
        self.started_at = time.time()
        self.preempted_for = ""  # set when stopped by a preemption: the job is requeued
        self.resize_to: tuple[str, ...] | None = None  # set when stopped to restart resized
        self._stop_requested = threading.Event()
        self._actors: list[Any] = []

    def request_stop(self) -> None:
        """Ask the workers to checkpoint and stop (idempotent; returns at once)."""
        self._stop_requested.set()

    def preempt(self, reason: str) -> None:
        """Stop to give the GPUs away: checkpoint, stop, and let the job be requeued."""
        if not self.preempted_for:
            self.preempted_for = reason or "preempted"
        self.request_stop()

    def resize(self, nodes: tuple[str, ...]) -> None:
        """Stop (with a checkpoint) to restart on ``nodes``: the scheduler starts the new gang
        once this one has ended. A preemption or cancel takes precedence."""
        if not self.stopping:
            self.resize_to = nodes
            self.request_stop()

    @property
    def stopping(self) -> bool:
        """Whether a stop (cancel, preemption, shutdown) was requested."""
        return self._stop_requested.is_set()

    def run(self) -> None:
        """Thread body: never raises; always leaves :attr:`outcome` set and the GPUs freed."""
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group

        pg = None
        try:
            pg = placement_group(
                [{"GPU": 1} for _ in self.nodes],
                strategy=self.strategy,
                name=f"orch-{self.job_id}",
                bundle_label_selector=[{"ray.io/node-id": n} for n in self.nodes],
            )
            ready = self._wait_placed(pg)
            if self._stop_requested.is_set():
                self.outcome = Outcome(OutcomeKind.STOPPED, "stopped before it started")
                return
            if not ready:
                self.outcome = Outcome(
                    OutcomeKind.LOST,
                    f"Ray could not place the gang in {self.placement_timeout_s:g} s",
                )
                return
            self.outcome = self._run_gang(pg)
        except Exception as err:  # the thread must report, never die silently
            log.exception("job %s: launcher error", self.job_id)
            self.outcome = Outcome(OutcomeKind.LOST, _failure_message(err))
        finally:
            for actor in self._actors:
                with contextlib.suppress(Exception):  # already dead
                    ray.kill(actor)
            if pg is not None:
                with contextlib.suppress(Exception):  # already removed (cluster shutting down)
                    remove_placement_group(pg)

    def _wait_placed(self, pg: Any) -> bool:
        """Wait for Ray to place the gang, in short slices so a stop request is seen at once."""
        import ray

        deadline = time.monotonic() + self.placement_timeout_s
        ref = pg.ready()
        while time.monotonic() < deadline and not self._stop_requested.is_set():
            ready, _ = ray.wait([ref], timeout=0.25)
            if ready:
                return True
        return False

    def _lost_peer(self, failed: Any) -> bool:
        """After a rank raised: whether a distributed error or a dead peer caused it. A peer
        dying (a node lost) makes the others fail in their collectives within milliseconds,
        long before Ray reports the dead actor, so the error alone would blame the workload."""
        import ray

        cause = getattr(failed, "cause", None)
        if type(cause).__name__ in DISTRIBUTED_ERRORS:
            return True
        pings = [a.__ray_ready__.remote() for a in self._actors]
        try:
            ray.get(pings, timeout=5)
        except Exception:  # a dead actor, or one too stuck to answer: treat as lost
            return True
        return False

    def _run_gang(self, pg: Any) -> Outcome:
        import ray
        from ray.exceptions import RayActorError, RayTaskError

        world = len(self.nodes)
        self._actors = start_workers(
            pg, self.job_id, num_threads=self.num_threads, reporter_factory=self.reporter_factory
        )
        init_method = None
        if world > 1:
            host, port = ray.get(self._actors[0].node_address.remote(), timeout=120)
            init_method = f"tcp://{host}:{port}"
        if not self.on_running():
            return Outcome(OutcomeKind.STOPPED, "cancelled before it started")
        cfg = harness_config(self.spec)
        refs = [a.run.remote(cfg, init_method, str(self.checkpoint_dir)) for a in self._actors]
        pending = list(refs)
        stop_sent_at: float | None = None
        while pending:
            done, pending = ray.wait(pending, num_returns=len(pending), timeout=0.25)
            for ref in done:
                try:
                    ray.get(ref)
                except RayTaskError as err:
                    if len(self._actors) > 1 and self._lost_peer(err):
                        return Outcome(OutcomeKind.LOST, f"gang broken: {_failure_message(err)}")
                    return Outcome(OutcomeKind.FAILED, _failure_message(err))
                except RayActorError as err:
                    return Outcome(OutcomeKind.LOST, f"worker lost: {_failure_message(err)}")
            if self._stop_requested.is_set():
                if stop_sent_at is None:
                    stop_sent_at = time.monotonic()
                    for actor in self._actors:
                        actor.request_stop.remote()
                elif time.monotonic() - stop_sent_at > self.stop_grace_s:
                    return Outcome(OutcomeKind.STOPPED, "stopped (grace period over, killed)")
        result = dict(ray.get(refs[0]))
        if result.get("status") == "stopped":
            return Outcome(OutcomeKind.STOPPED, "stopped on request", result)
        return Outcome(OutcomeKind.FINISHED, "", result)


class TuneRun(JobRun):
    """Tuning a job on a gang of pool GPUs (see ``orchestrator.tuner.remote``).

    Placed and cleaned up like a job run (a placement group on the policy's nodes); the tuner
    runs in a Ray task beside it and profiles trials on worker actors in its bundles. The
    outcome's ``result`` is the tuner's answer.
    """

    def __init__(
        self,
        job_id: str,
        spec: JobSpec,
        nodes: tuple[str, ...],
        strategy: str,
        redis_url: str,
        namespace: str,
        **kwargs: Any,
    ) -> None:
        super().__init__(job_id, spec, nodes, strategy, Path("."), None, lambda: True, **kwargs)
        self.redis_url = redis_url
        self.namespace = namespace

    def _run_gang(self, pg: Any) -> Outcome:
        import ray
        from ray.exceptions import RayError, RayTaskError
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from orchestrator.tuner.remote import tune_job

        # The driver needs no GPU of its own: the trials run in the gang's actors. It sits in
        # bundle 0 so it lives (and dies) with the gang.
        task = ray.remote(tune_job).options(
            num_cpus=0,
            num_gpus=0,
            max_retries=0,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                pg, placement_group_bundle_index=0
            ),
        )
        spec_data = self.spec.model_dump(mode="json", by_alias=True)
        ref = task.remote(
            spec_data, self.redis_url, self.namespace, self.job_id, pg, self.nodes, self.num_threads
        )
        while True:
            done, _ = ray.wait([ref], timeout=0.25)
            if done:
                break
            if self._stop_requested.is_set():
                # The study is in Redis: tuning resumes from it. The gang's actors belong to the
                # task and die with it (and with the placement group, removed in run()).
                ray.cancel(ref, force=True)
                return Outcome(OutcomeKind.STOPPED, "tuning stopped")
        try:
            answer: dict[str, Any] = ray.get(ref)
            return Outcome(OutcomeKind.FINISHED, "tuned", answer)
        except RayTaskError as err:
            if type(getattr(err, "cause", None)).__name__ == "EvaluatorLost":
                return Outcome(OutcomeKind.LOST, f"tuning gang lost: {_failure_message(err)}")
            return Outcome(OutcomeKind.FAILED, f"tuning failed: {_failure_message(err)}")
        except RayError as err:  # the worker or its node died
            return Outcome(OutcomeKind.LOST, f"tuning worker lost: {_failure_message(err)}")
