"""One run of a service with an endpoint on Ray: its replicas, each on a GPU of its own, added
and drained while the others serve (:meth:`~orchestrator.runtime.base.Runtime.resize`).

A service's replicas share no collective: each takes requests from the service's queue at the
ingress (``orchestrator.store.ingress``) when it is free. So each replica is a world of one
(rank 0, no process group) in a placement group of one bundle of its own, run by a
:class:`~orchestrator.runtime.gang_run.GangRun` of one node (placement, a warm worker when its
node has one, the stop and its grace period, the kill and the group's removal: as for any
1-GPU run). Ray cannot shrink a placement group, and a gang's group is removed as one; a group
per replica is what lets a scale-down give one GPU back to Ray while the others serve.

- **Scale-up**: a replica is started on each GPU the service is given; it takes traffic once
  its model has answered a first batch at every size (it joins the ingress's ready set then:
  ``workers.serve_endpoint``), while the replicas already there serve.
- **Scale-down**: the replicas on the GPUs it gives back are asked to stop: each leaves the
  ready set, answers what it took (a drain) and puts back what it never answered; its GPU is
  free once its group is removed. The others serve throughout.
- **Reports**: one replica writes the job's reports (the metrics sink; its figures of the
  whole service's load are read at the ingress). A scale-down removes the others first; when
  the reporting replica's own GPU is given back, a staying replica takes the sink over
  (``WorkerActor.hand_reports``).
- **A replica fails or is lost**: another is started on its GPU (the GPU stays the
  service's: the scheduler's grant does not change), taking traffic once its model is up, while
  the others serve (``REPLACED``). After :data:`MAX_REPLACEMENTS` replacements in one run, the
  next failure ends the run (the others are drained), as a rank of a gang does: the job is
  requeued or failed by the loop's table, never left short of the GPUs it holds. A node that
  is gone fails its replacement's placement too (after the placement timeout), so a lost node
  costs at most that many timeouts before the job is requeued onto other GPUs.
- **Events**: ``STARTED`` once the first replicas' workers exist; ``RESIZED`` once the run
  holds exactly the GPUs of a resize (the added replicas' workers exist, the removed ones'
  GPUs are free); ``REPLACED`` when a replica is replaced; ``ENDED`` once every replica has
  ended and freed its GPU.

The service's duration counts from its start (``serve.start_at``, stamped at launch when the
spec has none), so a replica added later ends with the others.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.runtime.base import EventKind, Launch, Outcome, OutcomeKind
from orchestrator.runtime.gang_run import Emit, GangRun

log = logging.getLogger(__name__)

__all__ = ["MAX_REPLACEMENTS", "ReplicaFactory", "ServiceEmit", "ServiceRun", "replicas_to_keep"]

MAX_REPLACEMENTS = 3
"""Replicas one run of a service replaces in place after a failure or a loss; the next one
ends the run (a replica whose model fails at every start must not be restarted forever)."""

ServiceEmit = Callable[[EventKind, Outcome | None, tuple[str, ...]], None]
"""Reports one of the run's events: its kind, its outcome (``ENDED``) and the nodes the run
holds (``RESIZED``)."""

ReplicaFactory = Callable[[Launch, int, bool, Emit], GangRun]
"""Builds (does not start) the run of one replica: its one-node launch, its number (unique in
the service's run: its placement group's name and its output's stream), whether it writes the
job's reports from the start, and where it reports its own events."""


@dataclass(eq=False)  # one replica: compared by identity
class _Replica:
    number: int
    node: str
    run: GangRun
    started: bool = False
    leaving: bool = False  # drained by a scale-down


def replicas_to_keep(
    replicas: list[tuple[str, bool, bool]], nodes: tuple[str, ...]
) -> tuple[list[int], list[str]]:
    """Which replicas a resize to ``nodes`` keeps, and the nodes it adds one on.

    Args:
        replicas: ``(node, reports, started)`` of each replica that stays so far, oldest
            first.
        nodes: the node of each GPU the service is to hold.

    Returns:
        The indexes (into ``replicas``) of those kept: on each node, the reporting replica
        first, then those started (their model may be serving already), oldest first; and
        one node per replica to add (``nodes`` less those kept).
    """
    want = Counter(nodes)
    order = sorted(range(len(replicas)), key=lambda i: (not replicas[i][1], not replicas[i][2], i))
    kept = []
    for i in order:
        if want[replicas[i][0]] > 0:
            want[replicas[i][0]] -= 1
            kept.append(i)
    return sorted(kept), list(want.elements())  # in the order of nodes


class ServiceRun:
    """A service's replicas on Ray (see the module doc); built by the Ray runtime with its
    lock held, started with :meth:`start`.

    Args:
        launch: what to run and where (one replica per entry of ``launch.nodes``).
        emit: reports the run's ``STARTED``, ``RESIZED`` (with the nodes) and ``ENDED``.
        reporter_factory: picklable; builds the reporting replica's metrics sink.
        replica: builds each replica's run (:data:`ReplicaFactory`).
    """

    def __init__(
        self,
        launch: Launch,
        emit: ServiceEmit,
        reporter_factory: Callable[[], Callable[[dict[str, Any]], None]] | None,
        replica: ReplicaFactory,
    ) -> None:
        serve = launch.spec.serve
        if serve is not None and serve.start_at is None:  # every replica ends with the first
            stamped = serve.model_copy(update={"start_at": time.time()})
            launch = dataclasses.replace(
                launch, spec=launch.spec.model_copy(update={"serve": stamped})
            )
        self.launch = launch
        self.job_id = launch.job_id
        self.emit = emit
        self.reporter_factory = reporter_factory
        self._make = replica
        self._numbers = itertools.count()
        self._lock = threading.Lock()
        self._replicas: list[_Replica] = []  # those holding a GPU (not ended yet)
        self._freed: list[str] = []  # nodes of replicas ended since take_freed
        self._reporter: _Replica | None = None
        self._resizing: tuple[str, ...] | None = None
        self._stopping = False  # a stop was asked for
        self._ending = False  # stopping, or a replica ended other than drained
        self._started = False
        self._failure: Outcome | None = None
        self._last: Outcome | None = None  # how the last replica that was not drained ended
        self._result: dict[str, Any] = {}
        self._replaced = 0  # replicas replaced in place after a failure or a loss
        self._to_start: list[_Replica] = []  # replacements, started once the lock is released
        for i, node in enumerate(launch.nodes):
            self._add(node, reports=i == 0)

    # ---- what the Ray runtime asks ---------------------------------------------------------

    @property
    def nodes(self) -> tuple[str, ...]:
        """The node of each GPU the run holds or is taking, and of those its ended replicas
        gave back since :meth:`take_freed` (still cooling, as an ended run's are)."""
        with self._lock:
            return tuple(r.node for r in self._replicas) + tuple(self._freed)

    def take_freed(self) -> list[str]:
        """The nodes of the GPUs replicas gave back since the last call."""
        with self._lock:
            freed, self._freed = self._freed, []
        return freed

    def has_settled(self) -> bool:
        """Whether every replica is placed and set up (see ``GangRun.settled``)."""
        with self._lock:
            return all(r.run.has_settled() for r in self._replicas)

    def start(self) -> None:
        """Start the first replicas."""
        with self._lock:
            runs = [r.run for r in self._replicas]
        for run in runs:
            run.start()

    def request_stop(self, at_once: bool = False) -> None:
        """Stop every replica (a drain; ``at_once``: killed). Idempotent."""
        with self._lock:
            self._stopping = self._ending = True
            for r in self._replicas:
                r.run.request_stop(at_once)

    def resize(self, nodes: tuple[str, ...]) -> None:
        """Hold one replica on each of ``nodes`` (see the module doc); returns at once, the
        ``RESIZED`` event follows.

        Raises:
            ValueError: the run is stopping, or a resize of it is still under way.
        """
        if not nodes:
            raise ValueError(f"{self.job_id}: a service keeps at least one replica")
        with self._lock:
            if self._ending:
                raise ValueError(f"{self.job_id}: the service is ending")
            if self._resizing is not None:
                raise ValueError(f"{self.job_id}: a resize is still under way")
            staying = [r for r in self._replicas if not r.leaving]
            kept, added = replicas_to_keep(
                [(r.node, r is self._reporter, r.started) for r in staying], nodes
            )
            for i, r in enumerate(staying):
                if i not in kept:
                    self._drain(r)
            fresh = [self._add(node, reports=False) for node in added]
            self._resizing = tuple(nodes)
            self._pass_reports()
            self._resized()
        for r in fresh:
            r.run.start()

    # ---- the replicas' events --------------------------------------------------------------

    def _add(self, node: str, *, reports: bool) -> _Replica:
        number = next(self._numbers)
        one = dataclasses.replace(self.launch, nodes=(node,))
        holder: list[_Replica] = []

        def on_event(kind: EventKind, outcome: Outcome | None) -> None:
            self._on_event(holder[0], kind, outcome)

        r = _Replica(number, node, self._make(one, number, reports, on_event))
        holder.append(r)
        self._replicas.append(r)
        if reports:
            self._reporter = r
        return r

    def _drain(self, r: _Replica) -> None:
        """Stop a replica a scale-down removes (it answers what it took first)."""
        r.leaving = True
        if r is self._reporter:  # a staying replica takes the reports over
            r.run.hand_reports(None)
            self._reporter = None
        r.run.request_stop()

    def _on_event(self, r: _Replica, kind: EventKind, outcome: Outcome | None) -> None:
        with self._lock:
            if kind is EventKind.STARTED:
                r.started = True
                if not self._started and all(x.started for x in self._replicas if not x.leaving):
                    self._started = True
                    self.emit(EventKind.STARTED, None, ())
            elif kind is EventKind.ENDED:
                self._ended(r, outcome or Outcome(OutcomeKind.LOST, "no outcome"))
            self._pass_reports()
            self._resized()
            if not self._replicas:
                self.emit(EventKind.ENDED, self._outcome(), ())
            fresh, self._to_start = self._to_start, []
        for x in fresh:
            x.run.start()

    def _ended(self, r: _Replica, outcome: Outcome) -> None:
        """A replica is over and its GPU free again."""
        self._replicas.remove(r)
        self._freed.append(r.node)
        if outcome.result and (r is self._reporter or not self._result):
            self._result = dict(outcome.result)
        if r is self._reporter:
            self._reporter = None
        if r.leaving:
            log.info("job %s: replica %d drained (%s)", self.job_id, r.number, outcome.kind.value)
            return
        # not drained: its service's duration is over, it was deposed, a stop was asked for,
        # or it failed; a failure within the budget is replaced on the same GPU, anything
        # else ends the run with it (the others end on their own, or are drained)
        failed = outcome.kind in (OutcomeKind.FAILED, OutcomeKind.LOST)
        if failed and not self._ending and self._replaced < MAX_REPLACEMENTS:
            self._replace(r, outcome)
            return
        self._last, self._ending = outcome, True
        if self._stopping or not failed:
            return
        log.warning(
            "job %s: replica %d %s: %s", self.job_id, r.number, outcome.kind.value, outcome.message
        )
        self._failure = outcome  # as a gang's rank: the job is requeued or failed
        for x in self._replicas:
            x.run.request_stop()

    def _replace(self, r: _Replica, outcome: Outcome) -> None:
        """Start another replica on the GPU of ``r``, which failed or was lost (its GPU stays
        the service's); it takes traffic once its model is up, as a scale-up's does."""
        self._replaced += 1
        self._freed.remove(r.node)  # not given back: the replacement takes it
        fresh = self._add(r.node, reports=False)
        self._to_start.append(fresh)
        log.warning(
            "job %s: replica %d %s (%s): replica %d replaces it on its GPU (%d of %d)",
            self.job_id,
            r.number,
            outcome.kind.value,
            outcome.message,
            fresh.number,
            self._replaced,
            MAX_REPLACEMENTS,
        )
        said = f"{outcome.message}; replaced ({self._replaced} of {MAX_REPLACEMENTS})"
        self.emit(EventKind.REPLACED, dataclasses.replace(outcome, message=said), (r.node,))

    def _pass_reports(self) -> None:
        """Give the reports to a started, staying replica when none writes them."""
        if self._reporter is not None or self._ending:
            return
        for r in self._replicas:
            if r.started and not r.leaving:
                r.run.hand_reports(self.reporter_factory)
                self._reporter = r
                log.info("job %s: replica %d writes the reports now", self.job_id, r.number)
                return

    def _resized(self) -> None:
        """Report a resize once the run holds exactly its GPUs, the added replicas up."""
        if self._resizing is None or self._ending:
            return
        if any(r.leaving or not r.started for r in self._replicas):
            return
        nodes, self._resizing = self._resizing, None
        self.emit(EventKind.RESIZED, None, nodes)

    def _outcome(self) -> Outcome:
        """How the run ended: a replica's failure, the stop asked for, or as its replicas
        ended (finished: the service's duration is over), with the reporting replica's
        result."""
        if self._failure is not None:
            return dataclasses.replace(self._failure, result=self._result)
        if self._stopping or self._last is None:
            return Outcome(OutcomeKind.STOPPED, "stopped on request", self._result)
        return dataclasses.replace(self._last, result=self._result)
