"""The warm worker pool: worker actors started before a job needs them, handed to 1-GPU runs.

A fresh :class:`workers.actor.WorkerActor` costs a job seconds before its first step: Ray
starts a worker process, which imports torch and the harness, and the first training step pays
for what autograd, the optimizer and CUDA set up lazily (2.3-2.5 s of the 3.1-3.4 s an
interactive job took from submission to its first step, ``BENCHMARKS.md``). The pool keeps up
to ``per_node`` actors per node started and warmed up (:meth:`WorkerActor.warm_up`) and gives
one to a 1-GPU run on its node (:meth:`WarmPool.claim`), which then starts at once.

**Two kinds of warm worker.** Where a node has a GPU that no run holds, a warm worker holds it
(its CUDA is initialised by its warm-up too). Where every GPU of a node is busy, which is when
an interactive job arrives to preempt a bulk one, the pool keeps a *GPU-less* warm worker there
instead: one that holds no GPU and has not initialised CUDA. A run handed one asks Ray
for its own one-GPU placement group, learns which GPU Ray gave the group
(:func:`~orchestrator.runtime.gang.bundle_gpu_ids`) and has the worker see only that one
(:meth:`WorkerActor.bind`, ``CUDA_VISIBLE_DEVICES`` before CUDA starts), so Ray's accounting
and the devices stay the same as for a fresh worker. A node's warm workers of both kinds
count against ``per_node``, and a node has no more of them than GPUs.

**GPU accounting.** Each GPU-holding warm actor holds one GPU of its node in Ray, through its
own one-bundle placement group; the scheduler's ledger does not know of warm actors and counts
their GPUs as free, so its decisions are those it makes without a pool. The runtime keeps the
two views consistent with three rules:

- A 1-GPU run on a node with a warm actor takes the actor *with its placement group* (a
  GPU-less one has none: the run asks for one): the group becomes the run's (removed when the run
  ends). The actor runs that one job and is killed after it, like a fresh one (a process that
  ran a job keeps its memory, threads and CUDA state).
- Every other launch (a gang of several GPUs, a tuning gang, a node whose warm actors are all
  taken) first takes every GPU-holding warm actor on its nodes out of the pool and gives them
  up (kills them and removes their groups) before its own placement group is created, so that
  group never waits on a warm actor. GPU-less ones hold nothing a gang needs and stay.
- The pool refills in the background, under the lock the runtime holds while it registers a
  launch and claims warm actors for it, only onto GPUs that no run of the runtime holds or is
  about to take, and only once every launched gang is placed and its workers are set up
  ("launches settled"): a warm actor never competes with a gang for a GPU, nor its warm-up
  with the gang's workers' start for the host's CPUs (on CPU-backed slots it slowed a
  preempting job's fresh worker by seconds). GPUs a run hands back become refillable one poll
  later (see ``RayRuntime._warm_demand``), after the round that may give them to a waiting job.

What a warm start still costs, and what a fresh one costs, is measured by
``bench/control_plane/latency.py`` (its "worker start" stage, and how many runs started warm).

Why 1-GPU runs only: a gang of several GPUs is one placement group (its strategy, removed as
one, which the tuner and the lost-peer check rely on), and its start also pays for the
``torch.distributed`` rendezvous, so warm actors in groups of their own would save it less and
split it across groups. Interactive jobs, which want the fast start, are mostly one GPU. Tuning
gangs keep fresh actors (their trials run for minutes).

Why not Ray's ``worker_process_setup_hook`` importing torch (with prestarted workers), which
was not built: it makes every Ray worker process (tasks, NVML probes, the tuner's driver) pay
torch's import time and memory, it does not guarantee a process exists before a job's actor
asks for one, and the first step's lazy set-up (autograd, optimizer, CUDA context) stays cold.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.pool import NodeInfo
from orchestrator.runtime.gang import place_gang, worker_options

log = logging.getLogger(__name__)

__all__ = ["REFILL_EVERY_S", "Demand", "WarmPool", "WarmWorker"]

_SERIAL = itertools.count(1)  # placement group names must be unique while the groups live

REFILL_EVERY_S = 0.25
"""How often the pool looks for GPUs to refill (a look costs no Ray call when nothing changed)."""

Demand = Callable[[], tuple[list[NodeInfo], Counter[str]] | None]
"""The runtime's answer to "where may warm actors go": the pool's nodes and the GPUs per node its
runs hold or are about to take, or ``None`` while a launch has not settled."""


@dataclass(eq=False)  # one actor: compared by identity
class WarmWorker:
    """One pre-started worker actor and the one-GPU placement group it lives in.

    Attributes:
        node_id: its node.
        pg: its placement group (one ``{"GPU": 1}`` bundle on the node); ``None`` for a
            GPU-less warm worker (see the module doc).
        actor: the ``WorkerActor``.
        ready: the reference of its ``warm_up()`` call (done: it is warm).
    """

    node_id: str
    pg: Any
    actor: Any
    ready: Any

    @property
    def gpuless(self) -> bool:
        """Whether it holds no GPU (a run handed it asks Ray for one)."""
        return self.pg is None

    def give_up(self) -> None:
        """Kill the actor and remove its placement group: its GPU is free in Ray again."""
        import ray
        from ray.util.placement_group import remove_placement_group

        with contextlib.suppress(Exception):  # already dead
            ray.kill(self.actor)
        if self.pg is not None:
            with contextlib.suppress(Exception):  # already removed (its node died)
                remove_placement_group(self.pg)


class WarmPool:
    """Up to ``per_node`` warm workers on each node (see the module doc).

    Args:
        per_node: warm workers per node; 0 disables the pool (nothing is started or claimed).
        demand: called with :attr:`lock` held before each refill (see :data:`Demand`).

    Attributes:
        lock: held by the runtime while it registers a launch and claims its warm workers, and
            by a refill while it counts free GPUs and starts actors on them.
    """

    def __init__(self, per_node: int, demand: Demand) -> None:
        self.per_node = per_node
        self.lock = threading.Lock()
        self._demand = demand
        self._workers: list[WarmWorker] = []
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start refilling in the background (idempotent; nothing when disabled or closed)."""
        if self.per_node <= 0 or self._thread is not None or self._closed.is_set():
            return
        self._thread = threading.Thread(target=self._refill_loop, name="warm-pool", daemon=True)
        self._thread.start()

    def claim(
        self, nodes: tuple[str, ...], *, adopt: bool
    ) -> tuple[WarmWorker | None, list[WarmWorker]]:
        """Take warm workers out of the pool for a launch on ``nodes`` (call with :attr:`lock`
        held, while registering the launch).

        Args:
            nodes: the node of each GPU of the launch.
            adopt: the launch can run on a warm worker (a 1-GPU job run).

        Returns:
            The warm worker the launch runs on (a ready one first, one holding a GPU before a
            GPU-less one), or ``None`` and the GPU-holding warm workers on its nodes that it must
            give up before it asks Ray for its GPUs.
        """
        if adopt:
            here = [w for w in self._workers if w.node_id == nodes[0]]
            if here:
                chosen = _readiest(here)
                self._workers.remove(chosen)
                return chosen, []
        wanted = set(nodes)
        evicted = [w for w in self._workers if w.node_id in wanted and not w.gpuless]
        self._workers = [w for w in self._workers if w not in evicted]
        return None, evicted

    def workers(self) -> list[tuple[str, bool]]:
        """``(node id, warm yet)`` of each worker in the pool, GPU-less ones included (for ``orch``
        views and tests)."""
        import ray

        with self.lock:
            workers = list(self._workers)
        if not workers:
            return []
        refs = [w.ready for w in workers]
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        finished = set(done)
        return [(w.node_id, w.ready in finished) for w in workers]

    def census(self) -> dict[str, tuple[int, int]]:
        """Per node: its warm workers, and how many of them hold a GPU (no Ray call: for the
        pool view the loop publishes every round)."""
        with self.lock:
            workers = list(self._workers)
        out: dict[str, tuple[int, int]] = {}
        for w in workers:
            count, holding = out.get(w.node_id, (0, 0))
            out[w.node_id] = (count + 1, holding + (not w.gpuless))
        return out

    def close(self) -> None:
        """Stop refilling and give every warm worker up (idempotent)."""
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self.lock:
            workers, self._workers = self._workers, []
        for w in workers:
            w.give_up()

    # ---- refilling ---------------------------------------------------------------------------

    def _refill_loop(self) -> None:
        failing = False
        while not self._closed.wait(REFILL_EVERY_S):
            try:
                self._drop_failed()
                self.refill()
                failing = False
            except Exception:  # Ray briefly unreachable: the next look tries again
                if not failing:  # once per outage, not four times a second
                    log.warning("warm pool: refill failed; retrying", exc_info=True)
                failing = True

    def refill(self) -> None:
        """Up to ``per_node`` warm workers on each node with GPUs, when launches have
        settled: on the GPUs that are free of runs, and GPU-less ones for the rest; give up those on
        nodes that left the pool."""
        with self.lock:
            state = self._demand()
            if self._closed.is_set() or state is None:
                return
            nodes, held = state
            alive = {n.node_id for n in nodes}
            gone = [w for w in self._workers if w.node_id not in alive]
            self._workers = [w for w in self._workers if w.node_id in alive]
            have = Counter(w.node_id for w in self._workers)
            holding = Counter(w.node_id for w in self._workers if not w.gpuless)
            for node in nodes:
                room = min(self.per_node, node.gpus) - have[node.node_id]
                free = max(0, node.gpus - held[node.node_id] - holding[node.node_id])
                for i in range(room):
                    self._workers.append(_start(node, gpuless=i >= free))
        for w in gone:
            w.give_up()

    def _drop_failed(self) -> None:
        """Give up warm workers whose warm-up failed (the process or its node died)."""
        import ray

        with self.lock:
            workers = list(self._workers)
        if not workers:
            return
        refs = [w.ready for w in workers]
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        finished = set(done)
        for w in workers:
            if w.ready not in finished:
                continue
            try:
                ray.get(w.ready, timeout=0)
            except Exception as err:
                log.warning("warm worker on node %s failed: %s", w.node_id[:8], err)
                with self.lock:
                    if w not in self._workers:
                        continue  # claimed meanwhile: its run sees the failure and copes
                    self._workers.remove(w)
                w.give_up()


def _start(node: NodeInfo, *, gpuless: bool = False) -> WarmWorker:
    """A worker actor on ``node``, warming up: in a one-GPU placement group of its own, or
    with no GPU and no group (GPU-less, see the module doc)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from orchestrator.store.sink import LogSink, MetricsSink
    from workers.actor import WorkerActor

    pg: Any = None
    if gpuless:
        options = {
            **_GPULESS_OPTIONS,
            "scheduling_strategy": NodeAffinitySchedulingStrategy(node.node_id, soft=False),
        }
    else:
        pg = place_gang(
            (node.node_id,), "STRICT_PACK", f"orch-warm-{node.node_id[:8]}-{next(_SERIAL)}"
        )
        options = worker_options(pg, 0)
    actor: Any = (
        ray.remote(WorkerActor)
        .options(**options)
        .remote(job_id="", rank=0, world_size=1, num_threads=1 if node.virtual else None)
    )
    # a job's sinks reach the actor pickled: their module is imported when it binds, unless
    # it was here (importing the store took ~0.2 s of a warm start on a 2-core dev machine)
    sinks = tuple(sorted({MetricsSink.__module__, LogSink.__module__}))
    return WarmWorker(node.node_id, pg, actor, actor.warm_up.remote(sinks, gpuless=gpuless))


# A GPU-less warm worker's Ray options: a job worker's (worker_options), but no GPU, no group.
_GPULESS_OPTIONS: dict[str, Any] = {
    "num_cpus": 0,
    "num_gpus": 0,
    "max_concurrency": 2,
    "max_restarts": 0,
}


def _readiest(workers: list[WarmWorker]) -> WarmWorker:
    """A warm worker done warming up if there is one, else the one started first; of those,
    one that holds a GPU before a GPU-less one."""
    import ray

    refs = [w.ready for w in workers]
    done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
    finished = set(done)
    return min(workers, key=lambda w: (w.ready not in finished, w.gpuless))
