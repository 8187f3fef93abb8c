"""The Ray runtime: one placement group per job, one worker actor per GPU, in a thread per run.

Why not Ray Train's ``TorchTrainer``: it creates and owns its own placement group and its own
failure handling. The control loop must own the placement group itself (the policy picks the
nodes, preemption removes the group, a resize is a restart on a new group), and a second
controller under it would make two layers decide about the same GPUs. The harness sets up
``torch.distributed`` itself (see ``workers.distributed``), which is all Ray Train would add.

Each run is a thread that blocks on Ray (:mod:`orchestrator.runtime.gang_run`); it reports
``STARTED`` and ``ENDED`` events into a queue that :meth:`RayRuntime.poll` drains. It never
writes job state.

A 1-GPU job run starts on a warm worker of its node when there is one, and every other launch
gives up the warm workers on its nodes before it asks Ray for its GPUs (see
:mod:`orchestrator.runtime.warm`).
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
from orchestrator.runtime.base import EventKind, Launch, Outcome, RunEvent
from orchestrator.runtime.gang_run import GangRun, TuneRun
from orchestrator.runtime.warm import WarmPool
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
        from orchestrator.store.ingress import ReplicaQueue

        emit = functools.partial(self._emit, launch.job_id, launch.serial)
        kw: dict[str, Any] = {
            "placement_timeout_s": self.placement_timeout_s,
            "stop_grace_s": self.stop_grace_s,
        }
        run: GangRun
        # Registered with the warm pool's lock held: a refill counts this run's GPUs as taken
        # from here on, and the warm workers it takes or gives up are out of the pool.
        with self.warm.lock:
            # a command job's working directory comes with its run: a warm actor runs it too
            adopt = launch.kind == "run" and len(launch.nodes) == 1
            warm, kw["evicted"] = self.warm.claim(launch.nodes, adopt=adopt)
            if launch.kind == "tune":
                run = TuneRun(launch, emit, self.redis_url, self.namespace, self.tune, **kw)
            else:
                sink = functools.partial(MetricsSink, self.redis_url, self.namespace, launch.job_id)
                logs = functools.partial(LogSink, self.redis_url, self.namespace, launch.job_id)
                fence = RunFence(self.redis_url, self.namespace, launch.job_id, launch.generation)
                zips = functools.partial(working_dir_ref, self.redis_url, self.namespace)
                serve = launch.spec.serve
                queue = (
                    ReplicaQueue(self.redis_url, self.namespace, launch.job_id)
                    if serve is not None and serve.endpoint
                    else None
                )
                run = GangRun(
                    launch,
                    emit,
                    sink,
                    log_sink_factory=logs,
                    warm=warm,
                    fence=fence,
                    working_dirs=zips,
                    requests=queue,
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
