"""The Ray runtime: one placement group per job, one worker actor per GPU, in a thread per run.

Why not Ray Train's ``TorchTrainer``: it creates and owns its own placement group and its own
failure handling. The control loop must own the placement group itself (the policy picks the
nodes, preemption removes the group, a resize is a restart on a new group, or a service's
replica added or drained in a group of its own), and a second
controller under it would make two layers decide about the same GPUs. The harness sets up
``torch.distributed`` itself (see ``workers.distributed``), which is all Ray Train would add.

Each run is a thread that blocks on Ray (:mod:`orchestrator.runtime.gang_run`); it reports
``STARTED`` and ``ENDED`` events into a queue that :meth:`RayRuntime.poll` drains. It never
writes job state.

A 1-GPU job run starts on a warm worker of its node when there is one, and every other launch
gives up the warm workers on its nodes before it asks Ray for its GPUs (see
:mod:`orchestrator.runtime.warm`).

A service with an endpoint runs as a :class:`~orchestrator.runtime.service_run.ServiceRun`
instead: one 1-GPU run per replica (each may start on a warm worker of its node), so that
:meth:`RayRuntime.resize` adds and drains replicas while the others serve.
"""

from __future__ import annotations

import functools
import logging
import queue
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from orchestrator.pool import GPUPool, NodeInfo
from orchestrator.runtime.base import EventKind, Launch, Outcome, RunEvent, in_place
from orchestrator.runtime.gang_run import Emit, GangRun, TuneRun
from orchestrator.runtime.service_run import ServiceRun
from orchestrator.runtime.warm import WarmPool, WarmWorker
from orchestrator.runtime.workdir import working_dir_ref

log = logging.getLogger(__name__)

__all__ = ["RayRuntime"]


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
        tune: the task a tuning launch runs on its gang
            (``orchestrator.tuner.remote.tune_job``; ``None``: tuning launches fail, saying so).

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
        tune: Callable[..., Any] | None = None,
    ) -> None:
        self.pool = pool
        self.tune = tune
        self.redis_url = redis_url
        self.namespace = namespace
        self.placement_timeout_s = placement_timeout_s
        self.stop_grace_s = stop_grace_s
        self._runs: dict[str, GangRun | ServiceRun] = {}
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
        if not all(run.has_settled() for run in runs):
            return None
        held = Counter(n for run in runs for n in run.nodes)
        return self._nodes, held + self._cooling

    def launch(self, launch: Launch) -> None:
        """See :meth:`Runtime.launch`."""
        from orchestrator.store import MetricsSink

        emit = functools.partial(self._emit, launch.job_id, launch.serial)
        run: GangRun | ServiceRun
        # Registered with the warm pool's lock held: a refill counts this run's GPUs as taken
        # from here on, and the warm workers it takes or gives up are out of the pool.
        with self.warm.lock:
            if launch.kind == "tune":
                _, evicted = self.warm.claim(launch.nodes, adopt=False)
                run = TuneRun(
                    launch, emit, self.redis_url, self.namespace, self.tune, **self._kw(evicted)
                )
            elif in_place(launch):
                sink = functools.partial(MetricsSink, self.redis_url, self.namespace, launch.job_id)
                run = ServiceRun(launch, emit, sink, self._replica)
            else:
                # a command job's working directory comes with its run: a warm actor runs it too
                warm, evicted = self.warm.claim(launch.nodes, adopt=len(launch.nodes) == 1)
                run = self._job_run(launch, emit, warm, evicted)
            self._runs[launch.job_id] = run
        run.start()

    def _kw(self, evicted: list[WarmWorker]) -> dict[str, Any]:
        """What every run is given: its limits, and the warm workers it gives up first."""
        return {
            "placement_timeout_s": self.placement_timeout_s,
            "stop_grace_s": self.stop_grace_s,
            "evicted": evicted,
        }

    def _job_run(
        self,
        launch: Launch,
        emit: Emit,
        warm: WarmWorker | None,
        evicted: list[WarmWorker],
        *,
        reports: bool = True,
        replica: int | None = None,
    ) -> GangRun:
        """A job's run on ``launch.nodes`` (not started), with its sinks; ``replica``: the
        number of a service's replica (its own placement group, its output apart)."""
        from orchestrator.store import LogSink, MetricsSink, RunFence
        from orchestrator.store.ingress import ReplicaQueue
        from orchestrator.store.sink import replica_log_sink

        url, ns, job_id = self.redis_url, self.namespace, launch.job_id
        sink = functools.partial(MetricsSink, url, ns, job_id) if reports else None
        logs = (
            functools.partial(LogSink, url, ns, job_id)
            if replica is None
            else functools.partial(replica_log_sink, url, ns, job_id, replica)
        )
        serve = launch.spec.serve
        queue = ReplicaQueue(url, ns, job_id) if serve is not None and serve.endpoint else None
        return GangRun(
            launch,
            emit,
            sink,
            log_sink_factory=logs,
            warm=warm,
            fence=RunFence(url, ns, job_id, launch.generation),
            working_dirs=functools.partial(working_dir_ref, url, ns),
            requests=queue,
            group_name=None if replica is None else f"orch-{job_id}-r{replica}",
            **self._kw(evicted),
        )

    def _replica(self, launch: Launch, number: int, reports: bool, emit: Emit) -> GangRun:
        """One replica of a service (a :data:`~.service_run.ReplicaFactory`, called with the
        warm pool's lock held): on a warm worker of its node when there is one."""
        warm, evicted = self.warm.claim(launch.nodes, adopt=True)
        return self._job_run(launch, emit, warm, evicted, reports=reports, replica=number)

    def resize(self, job_id: str, nodes: tuple[str, ...]) -> None:
        """See :meth:`Runtime.resize`."""
        run = self._runs.get(job_id)
        if not isinstance(run, ServiceRun):
            raise ValueError(f"{job_id}: no run of a service with an endpoint to resize")
        with self.warm.lock:  # the replicas it adds claim warm workers, as a launch does
            run.resize(tuple(nodes))

    def _emit(
        self,
        job_id: str,
        serial: int,
        kind: EventKind,
        outcome: Outcome | None,
        nodes: tuple[str, ...] = (),
    ) -> None:
        self._events.put(RunEvent(job_id, kind, time.time(), serial, outcome, nodes))
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
                    freed.update(run.nodes)
                    self._cooling.update(run.nodes)
            events.append(event)
        with self.warm.lock:  # the previous poll's GPUs have had their round: refillable
            for run in self._runs.values():  # and those a service's removed replicas gave back
                if isinstance(run, ServiceRun):
                    freed.update(run.take_freed())
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
