"""The Ray runtime: one placement group per job, one worker actor per GPU, in a thread per run.

Why not Ray Train's ``TorchTrainer``: it creates and owns its own placement group and its own
failure handling. The control loop must own the placement group itself (the policy picks the
nodes, preemption removes the group, a resize is a restart on a new group), and a second
controller under it would make two layers decide about the same GPUs. The harness sets up
``torch.distributed`` itself (see ``workers.distributed``), which is all Ray Train would add.

Each run is a thread that blocks on Ray; it reports ``STARTED`` and ``ENDED`` events into a
queue that :meth:`RayRuntime.poll` drains. It never writes job state.

A 1-GPU job run starts on a warm worker of its node when there is one, and every other launch
gives up the warm workers on its nodes before it asks Ray for its GPUs (see
:mod:`orchestrator.runtime.warm`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from orchestrator.pool import GPUPool, NodeInfo
from orchestrator.runtime.base import EventKind, Launch, Outcome, OutcomeKind, RunEvent
from orchestrator.runtime.gang import (
    DISTRIBUTED_ERRORS,
    bundle_gpu_ids,
    failure_message,
    place_gang,
    start_workers,
)
from orchestrator.runtime.harness_config import job_harness_config
from orchestrator.runtime.warm import WarmPool, WarmWorker
from orchestrator.runtime.workdir import ray_working_dir

log = logging.getLogger(__name__)

__all__ = ["GangRun", "RayRuntime", "TuneRun"]

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
        working_dirs: a command job's working directory digest -> its Ray URI (see
            :mod:`orchestrator.runtime.workdir`).

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
        working_dirs: Callable[[str], str] | None = None,
    ) -> None:
        super().__init__(name=f"{launch.kind}-{launch.job_id}", daemon=True)
        self.fence = fence
        self.working_dirs = working_dirs
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

    def request_stop(self, at_once: bool = False) -> None:
        """Ask the workers to checkpoint and stop (idempotent; returns at once). ``at_once``:
        kill them instead (see :meth:`Runtime.stop`)."""
        self._at_once = self._at_once or at_once
        self._stop_requested.set()

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
        self._pg = place_gang(self.launch.nodes, self.launch.strategy, f"orch-{self.job_id}")
        return self._wait_ready(self._pg.ready())

    def _place_gpuless(self, spare: WarmWorker) -> bool:
        """:meth:`_place` with a GPU-less warm worker: the run's own group, then the GPU Ray
        gave the group, which the worker binds to (:meth:`_run_gang`); a fresh worker instead
        if it died or the question failed."""
        import ray

        self._actors = [spare.actor]  # killed by run() whatever happens from here
        self._pg = place_gang(self.launch.nodes, self.launch.strategy, f"orch-{self.job_id}")
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
                runtime_env=self._runtime_env(),
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
        refs = [
            a.run.remote(cfg, init_method, ckpt, fence=self.fence if i == 0 else None, run_tag=tag)
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
                        return Outcome(OutcomeKind.STOPPED, "stopped before its first step")
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

    def _runtime_env(self) -> dict[str, str] | None:
        """A command job's working directory, as the URI Ray ships to every host."""
        digest = self.launch.spec.workload.working_dir
        if digest is None or self.working_dirs is None:
            return None
        return {"working_dir": self.working_dirs(digest)}


class TuneRun(GangRun):
    """Tuning a job on a gang of pool GPUs (see ``orchestrator.tuner.remote``).

    Placed and cleaned up like a job run (a placement group on the policy's nodes); the tuner
    runs in a Ray task beside it and profiles trials on worker actors in its bundles. The
    outcome's ``result`` is the tuner's answer.
    """

    def __init__(self, launch: Launch, emit: Emit, redis_url: str, namespace: str, **kw: Any):
        super().__init__(launch, emit, None, **kw)
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


class RayRuntime:
    """Runs gangs on a Ray pool (see the module doc); a :class:`~.base.Runtime`.

    Args:
        pool: the started GPU pool.
        redis_url: the URL workers stream their metrics to (and the tuner keeps its study in).
        namespace: the store's namespace.
        placement_timeout_s: Ray must place a gang within this, or the run ends as lost.
        stop_grace_s: how long a stopping run may take to checkpoint before it is killed.
        warm_workers: warm workers kept per node (``Settings.warm_workers``; 0: none). The
            pool fills after the loop's first round, and is given up by :meth:`close`.

    Attributes:
        warm: the warm worker pool (:mod:`orchestrator.runtime.warm`).
    """

    def __init__(
        self,
        pool: GPUPool,
        redis_url: str,
        namespace: str,
        *,
        placement_timeout_s: float = 60.0,
        stop_grace_s: float = 30.0,
        warm_workers: int = 0,
    ) -> None:
        self.pool = pool
        self.redis_url = redis_url
        self.namespace = namespace
        self.placement_timeout_s = placement_timeout_s
        self.stop_grace_s = stop_grace_s
        self._runs: dict[str, GangRun] = {}
        self._events: queue.SimpleQueue[RunEvent] = queue.SimpleQueue()
        self._nodes: list[NodeInfo] = []  # as the loop last saw them: where warm workers go
        self._cooling: Counter[str] = Counter()  # GPUs of the runs the last poll handed back
        self.warm = WarmPool(warm_workers, self._warm_demand)
        self.on_event: Callable[[], None] | None = None

    def nodes(self) -> list[NodeInfo]:
        """See :meth:`Runtime.nodes`."""
        self._nodes = self.pool.nodes()
        return self._nodes

    def _warm_demand(self) -> tuple[list[NodeInfo], Counter[str]] | None:
        """Where warm workers may go (called with the warm pool's lock held): the nodes, and
        per node the GPUs that runs hold or may be about to take; ``None`` while a launch has
        not settled (see :attr:`GangRun.settled`).

        GPUs a poll hands back (their run ended) stay off limits until the next poll: the loop
        polls at the start of a round and launches in it, so a job waiting for those GPUs
        (the one a preemption freed them for) has had its round to take them.
        """
        runs = list(self._runs.values())
        if not all(run.settled.is_set() for run in runs):
            return None
        held = Counter(n for run in runs for n in run.launch.nodes)
        return self._nodes, held + self._cooling

    def launch(self, launch: Launch) -> None:
        """See :meth:`Runtime.launch`."""
        from orchestrator.store import LogSink, MetricsSink, RunFence

        emit = functools.partial(self._emit, launch.job_id, launch.serial)
        kw: dict[str, Any] = {
            "placement_timeout_s": self.placement_timeout_s,
            "stop_grace_s": self.stop_grace_s,
        }
        run: GangRun
        # Registered with the warm pool's lock held: a refill counts this run's GPUs as taken
        # from here on, and the warm workers it takes or gives up are out of the pool.
        with self.warm.lock:
            # a warm actor's runtime environment is fixed: a command job needs its own
            single = len(launch.nodes) == 1 and launch.spec.workload.command is None
            adopt = launch.kind == "run" and single
            warm, kw["evicted"] = self.warm.claim(launch.nodes, adopt=adopt)
            if launch.kind == "tune":
                run = TuneRun(launch, emit, self.redis_url, self.namespace, **kw)
            else:
                sink = functools.partial(MetricsSink, self.redis_url, self.namespace, launch.job_id)
                logs = functools.partial(LogSink, self.redis_url, self.namespace, launch.job_id)
                fence = RunFence(self.redis_url, self.namespace, launch.job_id, launch.generation)
                zips = functools.partial(ray_working_dir, self.redis_url, self.namespace)
                run = GangRun(
                    launch,
                    emit,
                    sink,
                    log_sink_factory=logs,
                    warm=warm,
                    fence=fence,
                    working_dirs=zips,
                    **kw,
                )
            self._runs[launch.job_id] = run
        run.start()

    def _emit(self, job_id: str, serial: int, kind: EventKind, outcome: Outcome | None) -> None:
        self._events.put(RunEvent(job_id, kind, time.time(), serial, outcome))
        notify = self.on_event
        if notify is not None:
            try:
                notify()
            except Exception:  # a wake-up is an optimisation: polling still sees the event
                log.debug("could not wake the loop for %s", job_id, exc_info=True)

    def stop(self, job_id: str, *, at_once: bool = False) -> None:
        """See :meth:`Runtime.stop`."""
        run = self._runs.get(job_id)
        if run is not None:
            run.request_stop(at_once)

    def poll(self) -> list[RunEvent]:
        """See :meth:`Runtime.poll`."""
        events: list[RunEvent] = []
        freed: Counter[str] = Counter()
        while not self._events.empty():
            event = self._events.get_nowait()
            run = self._runs.get(event.job_id)
            ended = event.kind is EventKind.ENDED
            if ended and run is not None and run.launch.serial == event.launch:
                with self.warm.lock:  # a refill between here and the end sees them cooling
                    del self._runs[event.job_id]
                    freed.update(run.launch.nodes)
                    self._cooling.update(run.launch.nodes)
            events.append(event)
        with self.warm.lock:  # the previous poll's GPUs have had their round: refillable
            self._cooling = freed
        # the pool fills from the second poll on: the first round's launches come first
        if self._nodes:
            self.warm.start()
        return events

    def warm_workers(self) -> dict[str, tuple[int, int]]:
        """See :meth:`Runtime.warm_workers`."""
        return self.warm.census()

    def close(self) -> None:
        """See :meth:`Runtime.close`: gives up the warm workers."""
        self.warm.close()

    def alive(self) -> set[str]:
        """See :meth:`Runtime.alive`."""
        return set(self._runs)
