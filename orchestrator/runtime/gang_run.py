"""One run of a job on Ray, in a thread: its gang placed (a placement group on the nodes the
policy chose, or a warm worker), its workers started and run, stopped on request, and its GPUs
freed before it reports how it ended.

Each run is a thread that blocks on Ray; it reports ``STARTED`` and ``ENDED`` events through
the ``emit`` callback :class:`~orchestrator.runtime.ray_gang.RayRuntime` gives it, which queues
them for :meth:`RayRuntime.poll`. It never writes job state. :class:`TuneRun` is a tuning run:
the tuner's task beside the gang instead of the job's workers.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from orchestrator.runtime.base import EventKind, Launch, Outcome, OutcomeKind
from orchestrator.runtime.gang import (
    DISTRIBUTED_ERRORS,
    bundle_gpu_ids,
    failure_message,
    place_gang,
    start_workers,
)
from orchestrator.runtime.harness_config import job_harness_config
from orchestrator.runtime.warm import WarmWorker

log = logging.getLogger(__name__)

__all__ = ["Emit", "GangRun", "TuneRun"]

Emit = Callable[[EventKind, Outcome | None], None]


class GangRun(threading.Thread):
    """One attempt at running a job on the nodes the policy chose (see the module doc).

    Args:
        launch: what to run and where.
        emit: reports ``STARTED`` (workers up) and, exactly once, ``ENDED`` with the outcome
            after the gang's GPUs are free again.
        reporter_factory: picklable; builds rank 0's metrics sink on the worker.
        log_sink_factory: picklable; builds each rank's output sink on the worker (``None``:
            output is not captured).
        placement_timeout_s: give the GPUs back if Ray cannot place the gang in this time.
        stop_grace_s: how long a stop request waits for the checkpoint before killing.
        warm: a warm worker (with its placement group) to run on instead of a new gang: a
            1-GPU run on its node.
        evicted: warm workers on the gang's nodes, given up before its placement group is
            asked for (so it never waits on them).
        fence: picklable; rank 0 asks it whether the run is still current (see
            ``orchestrator.store.sink.RunFence``); ``None``: always.
        working_dirs: a command job's working directory digest -> its archive in Ray's object
            store (see :mod:`orchestrator.runtime.workdir`), handed to every rank's run.
        requests: picklable; a service endpoint's request queue
            (``orchestrator.store.ingress.ReplicaQueue``), handed to every rank's run: each
            rank is one replica taking requests from it.
        group_name: its placement group's name (unique while the group lives); default
            ``orch-{job id}``.

    Attributes:
        settled: set once the gang is placed and its workers are set up (rank 0 built its
            harness), or the run is over: until then the warm pool does not refill (see
            :mod:`orchestrator.runtime.warm`), so a warm-up never competes with a gang for its
            GPUs or with its workers' start for the host's CPUs.
    """

    def __init__(
        self,
        launch: Launch,
        emit: Emit,
        reporter_factory: Callable[[], Callable[[dict[str, Any]], None]] | None,
        *,
        log_sink_factory: Callable[[int], Any] | None = None,
        placement_timeout_s: float = 60.0,
        stop_grace_s: float = 30.0,
        warm: WarmWorker | None = None,
        evicted: list[WarmWorker] | None = None,
        fence: Callable[[], bool] | None = None,
        working_dirs: Callable[[str], Any] | None = None,
        requests: Any = None,
        group_name: str | None = None,
    ) -> None:
        super().__init__(name=f"{launch.kind}-{launch.job_id}", daemon=True)
        self.group_name = group_name or f"orch-{launch.job_id}"
        self.fence = fence
        self.working_dirs = working_dirs
        self.requests = requests
        self.launch = launch
        self.job_id = launch.job_id
        self.emit = emit
        self.reporter_factory = reporter_factory
        self.log_sink_factory = log_sink_factory
        self.num_threads = 1 if launch.virtual else None
        self.placement_timeout_s = placement_timeout_s
        self.stop_grace_s = stop_grace_s
        self._stop_requested = threading.Event()
        self._at_once = False
        self._actors: list[Any] = []
        self._pg: Any = None
        self.warm = warm
        self._gpu_ids: tuple[str, ...] | None = None  # a GPU-less warm worker's GPU (see _place)
        self.evicted = list(evicted or ())
        self.settled = threading.Event()

    @property
    def nodes(self) -> tuple[str, ...]:
        """The node of each GPU the run holds, or may be about to take."""
        return self.launch.nodes

    def has_settled(self) -> bool:
        """Whether it is placed and set up, or over (see :attr:`settled`)."""
        return self.settled.is_set()

    def request_stop(self, at_once: bool = False) -> None:
        """Ask the workers to checkpoint and stop (idempotent; returns at once). ``at_once``:
        kill them instead (see :meth:`Runtime.stop`)."""
        self._at_once = self._at_once or at_once
        self._stop_requested.set()

    def hand_reports(
        self, reporter_factory: Callable[[], Callable[[dict[str, Any]], None]] | None
    ) -> None:
        """Rank 0 writes the job's reports from now on with this sink (``None``: it stops
        writing them): a service's reporting replica moves when it is removed (see
        :mod:`orchestrator.runtime.service_run`). Call it once the run has reported
        ``STARTED`` (its workers exist)."""
        self.reporter_factory = reporter_factory
        if self._actors:
            self._actors[0].hand_reports.remote(reporter_factory)

    def run(self) -> None:
        """Thread body: never raises; always frees the GPUs, then reports how the run ended."""
        import ray
        from ray.util.placement_group import remove_placement_group

        outcome = Outcome(OutcomeKind.LOST, "no outcome")
        try:
            for w in self.evicted:  # before our group exists: it must never wait on them
                w.give_up()
            ready = self._place()
            if self._stop_requested.is_set():
                outcome = Outcome(OutcomeKind.STOPPED, "stopped before it started")
            elif not ready:
                outcome = Outcome(
                    OutcomeKind.LOST,
                    f"Ray could not place the gang in {self.placement_timeout_s:g} s",
                )
            else:
                outcome = self._run_gang(self._pg)
        except Exception as err:  # the thread must report, never die silently
            log.exception("job %s: launcher error", self.job_id)
            outcome = Outcome(OutcomeKind.LOST, failure_message(err))
        finally:
            self.settled.set()
            for actor in self._actors:  # used once: a warm worker too, never back to the pool
                with contextlib.suppress(Exception):  # already dead
                    ray.kill(actor)
            if self._pg is not None:
                with contextlib.suppress(Exception):  # already removed (cluster shutting down)
                    remove_placement_group(self._pg)
            self.emit(EventKind.ENDED, outcome)

    def _place(self) -> bool:
        """Get the gang's GPUs (``self._pg``); whether they are placed (``False``: a stop came
        first, or the placement timeout passed).

        A run given a warm worker takes its placement group and waits for its warm-up; if the
        warm worker died, the run asks for a fresh group instead. A run given a GPU-less warm
        worker asks for its group, then gives it that group's GPU (see
        :mod:`orchestrator.runtime.warm`).
        """
        import ray

        warm, self.warm = self.warm, None
        if warm is not None and warm.gpuless:
            return self._place_gpuless(warm)
        if warm is not None:
            self._pg, self._actors = warm.pg, [warm.actor]
            if not self._wait_ready(warm.ready):
                return False
            try:
                ray.get(warm.ready)
                return True
            except Exception as err:  # its process died while warming up: start fresh
                log.warning("job %s: warm worker lost (%s); starting a new one", self.job_id, err)
                warm.give_up()
                self._pg, self._actors = None, []
        self._pg = place_gang(self.launch.nodes, self.launch.strategy, self.group_name)
        return self._wait_ready(self._pg.ready())

    def _place_gpuless(self, spare: WarmWorker) -> bool:
        """:meth:`_place` with a GPU-less warm worker: the run's own group, then the GPU Ray
        gave the group, which the worker binds to (:meth:`_run_gang`); a fresh worker instead
        if it died or the question failed."""
        import ray

        self._actors = [spare.actor]  # killed by run() whatever happens from here
        self._pg = place_gang(self.launch.nodes, self.launch.strategy, self.group_name)
        if not self._wait_ready(self._pg.ready()) or not self._wait_ready(spare.ready):
            return False
        try:
            ray.get(spare.ready)
            self._gpu_ids = bundle_gpu_ids(self._pg, 0)
        except Exception as err:  # its process died, or Ray could not answer: start fresh
            log.warning(
                "job %s: GPU-less warm worker not usable (%s); starting a new one", self.job_id, err
            )
            spare.give_up()
            self._actors, self._gpu_ids = [], None
        return True

    def _wait_ready(self, ref: Any) -> bool:
        """Wait for ``ref`` (a group's placement, a warm-up) in short slices, so a stop request
        is seen at once; ``False`` if a stop came or the placement timeout passed first."""
        import ray

        deadline = time.monotonic() + self.placement_timeout_s
        while time.monotonic() < deadline and not self._stop_requested.is_set():
            ready, _ = ray.wait([ref], timeout=0.25)
            if ready:
                return True
        return False

    def _ask_set_up(self, asked: Any) -> Any:
        """Settle once rank 0 has built its harness: ask it (one question at a time) and
        return the question still open, if any."""
        import ray

        if asked is not None:
            if not ray.wait([asked], timeout=0)[0]:
                return asked
            try:
                up = bool(ray.get(asked))
            except Exception:  # rank 0 died: the run ends on its own; refills need not wait
                up = True
            if up:
                self.settled.set()
                return None
        return self._actors[0].is_set_up.remote()

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

        world = len(self.launch.nodes)
        if self._actors:  # a warm worker: it becomes this job's rank 0
            bound = self._actors[0].bind.remote(
                self.job_id,
                reporter_factory=self.reporter_factory,
                log_sink_factory=self.log_sink_factory,
                num_threads=self.num_threads,
                gpu_ids=self._gpu_ids,
            )
            ray.get(bound, timeout=120)
            self.settled.set()  # warm: nothing left to set up
        else:
            self._actors = start_workers(
                pg,
                self.job_id,
                num_threads=self.num_threads,
                reporter_factory=self.reporter_factory,
                log_sink_factory=self.log_sink_factory,
            )
        init_method = None
        if world > 1:
            host, port = ray.get(self._actors[0].node_address.remote(), timeout=120)
            init_method = f"tcp://{host}:{port}"
        self.emit(EventKind.STARTED, None)
        cfg = job_harness_config(self.launch.spec)
        from workers.checkpoint import run_tag

        ckpt = str(self.launch.checkpoint_dir)
        tag = run_tag(self.launch.generation, self.launch.serial)
        archive = self._working_dir()
        refs = [
            a.run.remote(
                cfg,
                init_method,
                ckpt,
                fence=self.fence if i == 0 else None,
                run_tag=tag,
                working_dir=archive,
                requests=self.requests,
            )
            for i, a in enumerate(self._actors)
        ]
        pending = list(refs)
        stop_sent_at: float | None = None
        set_up: Any = None  # rank 0's answer to "is your harness built?" (fresh workers)
        while pending:
            done, pending = ray.wait(pending, num_returns=len(pending), timeout=0.25)
            if not self.settled.is_set():
                set_up = self._ask_set_up(set_up)
            for ref in done:
                try:
                    ray.get(ref)
                except RayTaskError as err:
                    if len(self._actors) > 1 and self._lost_peer(err):
                        return Outcome(OutcomeKind.LOST, f"gang broken: {failure_message(err)}")
                    return Outcome(OutcomeKind.FAILED, failure_message(err))
                except RayActorError as err:
                    return Outcome(OutcomeKind.LOST, f"worker lost: {failure_message(err)}")
            if self._stop_requested.is_set():
                if stop_sent_at is None:
                    stop_sent_at = time.monotonic()
                    if self._at_once:
                        return Outcome(OutcomeKind.STOPPED, "stopped at once (nothing to save)")
                    for actor in self._actors:
                        actor.request_stop.remote()
                elif time.monotonic() - stop_sent_at > self.stop_grace_s:
                    return Outcome(OutcomeKind.STOPPED, "stopped (grace period over, killed)")
        result = dict(ray.get(refs[0]))
        if result.get("status") == "fenced":
            return Outcome(OutcomeKind.STOPPED, "deposed: a newer run owns the job", result)
        if result.get("status") == "stopped":
            return Outcome(OutcomeKind.STOPPED, "stopped on request", result)
        return Outcome(OutcomeKind.FINISHED, "", result)

    def _working_dir(self) -> Any:
        """A command job's working directory, as the object every rank's run receives."""
        digest = self.launch.spec.workload.working_dir
        if digest is None or self.working_dirs is None:
            return None
        return self.working_dirs(digest)


class TuneRun(GangRun):
    """Tuning a job on a gang of pool GPUs with the tuner the runtime was handed (``tune``:
    ``orchestrator.tuner.remote.tune_job``, which the services pass in: the runtime sits below
    the tuner and never imports it).

    Placed and cleaned up like a job run (a placement group on the policy's nodes); the tuner
    runs in a Ray task beside it and profiles trials on worker actors in its bundles. The
    outcome's ``result`` is the tuner's answer.
    """

    def __init__(
        self,
        launch: Launch,
        emit: Emit,
        redis_url: str,
        namespace: str,
        tune: Callable[..., Any] | None,
        **kw: Any,
    ):
        super().__init__(launch, emit, None, **kw)
        self.redis_url = redis_url
        self.namespace = namespace
        self.tune = tune

    def _run_gang(self, pg: Any) -> Outcome:
        import ray
        from ray.exceptions import RayError, RayTaskError
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if self.tune is None:
            return Outcome(OutcomeKind.FAILED, "this runtime was started without a tuner")
        # The driver needs no GPU of its own: the trials run in the gang's actors. It sits in
        # bundle 0 so it lives (and dies) with the gang.
        task = ray.remote(self.tune).options(
            num_cpus=0,
            num_gpus=0,
            max_retries=0,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                pg, placement_group_bundle_index=0
            ),
        )
        spec_data = self.launch.spec.model_dump(mode="json", by_alias=True)
        ref = task.remote(
            spec_data,
            self.redis_url,
            self.namespace,
            self.job_id,
            pg,
            self.launch.nodes,
            self.num_threads,
        )
        self.emit(EventKind.STARTED, None)
        self.settled.set()  # the trials' actors come and go: refills wait no longer
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
                return Outcome(OutcomeKind.LOST, f"tuning gang lost: {failure_message(err)}")
            return Outcome(OutcomeKind.FAILED, f"tuning failed: {failure_message(err)}")
        except RayError as err:  # the worker or its node died
            return Outcome(OutcomeKind.LOST, f"tuning worker lost: {failure_message(err)}")
