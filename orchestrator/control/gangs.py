"""Acting on gangs, for the loop's bind phase: start a queued job (place, launch, or requeue or
fail one that cannot start), resize a running elastic job and relaunch it on its new GPUs (a
service with an endpoint in place instead: replicas added or drained while the others serve),
stop a run, tell a queued job why it waits.

:class:`GangActions` is a collaborator of :class:`~orchestrator.control.loop.ControlLoop`: it
is handed what it acts on and through (the loop's :class:`~orchestrator.control.state.LoopState`,
the store, the runtime, the facts reader, the SLA guard, the lease) and owns one thing of its
own, the serial of the next launch. The reaper (:mod:`~orchestrator.control.reap`) uses it too,
to stop a run cancelled meanwhile and to relaunch a resized one. The sizing rules it applies
(:func:`fit`, :func:`smallest_memory`, :func:`all_virtual`) are pure.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import ValidationError

from orchestrator.control.facts import JobFactsReader
from orchestrator.control.ledger import Run, reserve
from orchestrator.control.sla_guard import SLAGuard
from orchestrator.control.state import LoopState
from orchestrator.control.telemetry import LoopTelemetry
from orchestrator.control.transitions import StopReason
from orchestrator.errors import IllegalTransition, JobNotFound, SpecError
from orchestrator.kinds import precisions
from orchestrator.pool import NodeInfo
from orchestrator.runtime.base import Launch, Runtime, in_place
from orchestrator.storage import StorageLocation
from orchestrator.store import JobStore
from orchestrator.store.lease import Lease
from orchestrator.store.records import JobRecord
from orchestrator.store.states import TERMINAL, JobState
from orchestrator.tuner.replan import describe_applied
from orchestrator.weights import trained_weights
from policies import Decision
from policies.scheduling.resize import drop_gpus

log = logging.getLogger(__name__)

__all__ = [
    "GangActions",
    "all_virtual",
    "fit",
    "is_bulk_run",
    "is_service_run",
    "smallest_memory",
    "where",
]


class GangActions:
    """The loop's actions on gangs (see the module doc).

    Args:
        state: the loop's runs, queued views, running facts, waits and nodes.
        store: the job store (transitions, notes).
        runtime: launches, stops and resizes gangs.
        facts: reads a job's elastic sizes and sized config.
        telemetry: the loop's counters.
        sla_guard: watches a launched run's SLA.
        lease: the scheduler lease (its generation goes with each launch).
        checkpoint_dir: where runs keep their checkpoints, one folder per job.
        clock: wall clock (seconds).
    """

    def __init__(
        self,
        state: LoopState,
        store: JobStore,
        runtime: Runtime,
        *,
        facts: JobFactsReader,
        telemetry: LoopTelemetry,
        sla_guard: SLAGuard,
        lease: Lease,
        checkpoint_dir: StorageLocation,
        clock: Callable[[], float],
    ) -> None:
        self.state = state
        self.store = store
        self.runtime = runtime
        self.facts = facts
        self.telemetry = telemetry
        self.sla_guard = sla_guard
        self.lease = lease
        self.checkpoint_dir = checkpoint_dir
        self.clock = clock
        self._serial = 0  # the last launch's serial: a run's events carry it

    def stop(self, run: Run, reason: StopReason, note: str) -> None:
        """Ask a run to stop, remembering why (a cancel or shutdown overrides a preemption or
        resize: the job is not restarted then)."""
        if run.stop in (StopReason.CANCEL, StopReason.SHUTDOWN):
            return
        # a run that was to restart elsewhere does not; a service resized in place holds its
        # old and new GPUs until it has ended
        if reason is not StopReason.RESIZE and not in_place(run.launch):
            run.resize_to = None
        run.stop, run.stop_note = reason, note
        # a bulk run with no step reported is killed: nothing to save, and its set-up would
        # hold the GPUs for seconds (interactive runs' progress is not read: they checkpoint);
        # so is a service stopped to be resized or preempted: it has no state to save, and its
        # graceful stop (its process ending) kept it seconds longer from its relaunch
        at_once = (not run.stepped and is_bulk_run(run)) or (
            reason in (StopReason.RESIZE, StopReason.PREEMPT) and is_service_run(run)
        )
        self.runtime.stop(run.job_id, at_once=at_once)

    def preempt(self, d: Decision) -> None:
        """Stop a running job the policy preempts (it requeues and resumes later)."""
        run = self.state.runs.get(d.job_id)
        if run is not None and not run.leaving:
            log.info("%s: preempting (%s)", d.job_id, d.reason)
            self.stop(run, StopReason.PREEMPT, d.reason)
            self.telemetry.preempted()
            self.store.annotate(d.job_id, f"preempting: {d.reason}")

    def wait(self, job_id: str, reason: str) -> None:
        """Tell the user why a queued job waits (once per distinct reason)."""
        if self.state.waits.get(job_id) != reason:
            self.state.waits[job_id] = reason
            try:
                self.store.annotate(job_id, f"waiting: {reason}")
            except JobNotFound:
                self.state.waits.pop(job_id, None)

    def start(self, d: Decision, free: dict[str, int]) -> None:
        """Place a queued job on the decision's GPUs and launch it (tuning first if it asks to
        be tuned and is not yet)."""
        job_id, nodes = d.job_id, tuple(d.nodes)
        if job_id in self.state.runs:  # never two runs of one job
            return
        cached = self.state.queued.get(job_id)
        if cached is not None and cached.lo != cached.hi and not cached.interactive:
            # An elastic job runs on the largest size in what it was given that keeps its
            # global batch (its speedup curve makes the others worth no more than that one).
            info = self.facts.elastic(job_id)
            if info is not None and not (nodes := fit(self.facts.sizes(job_id), nodes)):
                self.wait(job_id, "no size in its GPU range keeps its global batch here")
                return
        if not reserve(free, nodes):
            self.wait(job_id, "its GPUs are being freed by a preemption")
            return
        try:
            rec = self.store.transition(
                job_id,
                JobState.PLACED,
                expect=JobState.QUEUED,
                message=f"placed on {len(set(nodes))} node(s)",
                fields={"placement": {"nodes": list(nodes), "strategy": d.strategy}},
            )
        except (IllegalTransition, JobNotFound):
            for n in nodes:  # cancelled since the snapshot: its GPUs stay free
                free[n] += 1
            return
        self.state.waits.pop(job_id, None)
        self.state.queued.pop(job_id, None)
        self.telemetry.placed(rec)
        self._launch(rec, nodes, d.strategy)

    def _launch(
        self,
        rec: JobRecord,
        nodes: tuple[str, ...],
        strategy: str,
        stream: dict[str, float] | None = None,
    ) -> None:
        """Launch a placed job's gang (a tuning gang when it is still to be tuned); a job that
        cannot start is requeued or failed with the reason, never left placed. ``stream``: a
        resized service's ``serve.start_at`` (where its arrival stream began: its new run goes
        on from there) and ``serve.stopped_at`` (when the run before stopped serving)."""
        job_id = rec.id
        try:
            spec = rec.spec
        except ValidationError as err:  # stored under an older version, no longer valid
            first = err.errors()[0]
            self._fail_placed(job_id, JobState.FAILED, f"the stored job is invalid: {first}")
            return
        tune = spec.tuning.enabled and not rec.fields.get("tuned")  # "": being re-tuned
        applied: dict[str, Any] = {}
        replanned = ""
        try:
            if not tune:
                pool = self.state.nodes
                has = run_precisions(pool, nodes)
                sized = self.facts.sized(rec, len(nodes), smallest_memory(pool, nodes), has)
                spec = sized.spec or spec
                if stream and spec.serve is not None:
                    serve = spec.serve.model_copy(update=stream)
                    spec = spec.model_copy(update={"serve": serve})
                weights = trained_weights(self.store, spec, self.checkpoint_dir)
                if weights is not None and spec.serve is not None:
                    serve = spec.serve.model_copy(update={"weights": weights})
                    spec = spec.model_copy(update={"serve": serve})
                applied = sized.applied()
                if sized.source in ("measured", "model") or sized.was:  # chosen here: say why
                    replanned = f"on {len(nodes)} GPUs: {sized.reason}"
            self._serial += 1
            launch = Launch(
                job_id,
                "tune" if tune else "run",
                spec,
                nodes,
                strategy,
                self._serial,
                self.checkpoint_dir / job_id,
                all_virtual(self.state.nodes, nodes),
                self.lease.generation,
            )
            self.runtime.launch(launch)
        except SpecError as err:  # serve.from_job no longer names a job it may serve
            self._fail_placed(job_id, JobState.FAILED, str(err))
            return
        except Exception as err:  # never leave a job placed with nothing running it
            log.exception("%s: could not start", job_id)
            self._fail_placed(job_id, JobState.QUEUED, f"requeued: could not start: {err}")
            return
        self.state.runs[job_id] = Run(launch, self.clock())
        self.state.facts[job_id] = self.facts.running(rec, launch.kind)
        if replanned:
            log.info("%s: %s", job_id, replanned)
            with contextlib.suppress(JobNotFound):
                self.store.annotate(job_id, replanned)
        if applied:  # what the workers apply: an event, and what show, list and /metrics say
            text = f"runs {describe_applied(applied)} ({applied['source']})"
            with contextlib.suppress(JobNotFound):
                self.store.note_event(
                    job_id, "config", text, {"applied": json.dumps(applied)}, as_message=False
                )
        if not tune:
            self.sla_guard.watch(rec, spec, len(nodes))
        if tune:
            gpus = len(nodes)
            self.store.annotate(job_id, f"tuning: profiling configs on up to {gpus} GPU(s)")
        if spec.job_class == "bulk" and spec.resources.gpus.min != spec.resources.gpus.upper:
            self.facts.forget(job_id)  # re-read: tuned settings or a new profile
            self.facts.elastic(job_id)
        log.info("%s: %s on %s", job_id, "tuning" if tune else "placed", where(nodes))

    def _fail_placed(self, job_id: str, target: JobState, message: str) -> None:
        fields: dict[str, Any] = {"placement": ""}
        if target in TERMINAL:
            fields["finished_at"] = self.clock()
        try:
            self.store.transition(
                job_id, target, expect=JobState.PLACED, message=message, fields=fields
            )
        except (IllegalTransition, JobNotFound):  # cancelled meanwhile: it is cancelled now
            with contextlib.suppress(IllegalTransition, JobNotFound):
                self.store.transition(
                    job_id, JobState.CANCELLED, expect=JobState.CANCELLING, fields=fields
                )

    def relaunch(self, rec: JobRecord, run: Run) -> None:
        """A run stopped for a resize has ended and its job is placed on its new GPUs: go on
        there (from its checkpoint; a service from where its arrival stream is now)."""
        nodes = run.resize_to or ()
        try:
            fresh = self.store.get(rec.id)
        except JobNotFound:
            return
        stream: dict[str, float] | None = None
        if run.launch.spec.serve is not None:  # a service goes on where its stream is
            keys = ("stream_started_at", "served_until")
            got = self.store.latest_metrics([rec.id], keys).get(rec.id, {})
            began, until = got.get("stream_started_at"), got.get("served_until")
            if isinstance(began, int | float) and began > 0:
                stream = {"start_at": float(began)}
                if isinstance(until, int | float) and until > 0:
                    stream["stopped_at"] = float(until)  # due since: dropped, not lost
        self._launch(fresh, nodes, run.launch.strategy, stream)

    def resize(self, d: Decision, free: dict[str, int]) -> None:
        """Restart a running elastic job on the decision's GPUs (checkpoint, stop, start the new
        gang once the old one is gone), at a size that keeps its global batch; a service with
        an endpoint is resized in place (:meth:`_scale`)."""
        run = self.state.runs.get(d.job_id)
        if run is None or run.stop is not None or run.launch.kind == "tune":
            return
        # a move: the same number of GPUs elsewhere (another GPU kind, where it runs faster:
        # policies.scheduling.kind_moves), for any bulk job, elastic or not
        moving = len(d.nodes) == len(run.nodes) and Counter(d.nodes) != Counter(run.nodes)
        base = (self.facts.cached(d.job_id) or (None, ()))[0]
        if base is None and not moving:
            return
        if run.resize_to is not None:  # a resize in place still under way: one at a time
            return
        nodes = tuple(d.nodes) if moving else fit(self.facts.sizes(d.job_id), tuple(d.nodes))
        if not nodes or (len(nodes) == len(run.nodes) and not moving):
            return
        extra = [n for n in nodes]
        for n in run.nodes:
            if n in extra:
                extra.remove(n)
        scale = in_place(run.launch)
        if scale and not run.started:
            return  # its replicas are still coming up: the policy asks again next round
        if not reserve(free, extra):
            return  # its new GPUs are still being freed: the policy asks again next round
        if scale:
            if not self._scale(run, nodes, d.reason):
                for n in extra:  # not taken after all: free for the rest of the round
                    free[n] += 1
            return
        if moving:
            note = f"moved to {len(nodes)} other GPUs; resumes"
        else:
            note = f"resized from {len(run.nodes)} to {len(nodes)} GPUs; resumes"
        log.info("%s: resizing %d -> %d GPUs (%s)", d.job_id, len(run.nodes), len(nodes), d.reason)
        run.resize_to = nodes
        self.stop(run, StopReason.RESIZE, note)
        self.telemetry.resized()
        what = "moving" if moving else f"resizing to {len(nodes)} GPUs"
        self.store.annotate(d.job_id, f"{what}: {d.reason}")

    def _scale(self, run: Run, nodes: tuple[str, ...], reason: str) -> bool:
        """Resize a service with an endpoint in place (``Runtime.resize``): replicas are added
        on its new GPUs (each takes traffic once its model answered a first batch) and drained
        on those it gives back, while the others serve; its job stays running. Until the
        runtime says it is done (``RESIZED``: reaped by ``Reaper``) the run holds
        its old and its new GPUs (``Run.resize_to``): a GPU it gives back is taken by another
        job only once its replica has drained and Ray has it back. Returns whether the
        runtime took the resize."""
        try:
            self.runtime.resize(run.job_id, nodes)
        except ValueError as err:  # it is ending, or a resize is still under way
            log.info("%s: not scaled: %s", run.job_id, err)
            return False
        run.resize_to = nodes
        before, after = len(run.nodes), len(nodes)
        log.info("%s: scaling %d -> %d replicas in place (%s)", run.job_id, before, after, reason)
        self.telemetry.resized()
        with contextlib.suppress(JobNotFound):
            self.store.annotate(
                run.job_id, f"scaling from {before} to {after} replicas, serving: {reason}"
            )
        return True


def fit(sizes: Sequence[int], nodes: tuple[str, ...]) -> tuple[str, ...]:
    """``nodes`` cut to the largest of the job's ``sizes`` (those it can keep its global
    batch on: ``JobFactsReader.sizes``) that they hold (empty if none fits)."""
    sizes = [n for n in sizes if n <= len(nodes)]
    if not sizes:
        return ()
    kept = list(nodes)
    drop_gpus(kept, len(kept) - sizes[-1])
    return tuple(kept)


def smallest_memory(pool: Sequence[NodeInfo], nodes: tuple[str, ...]) -> float | None:
    """Bytes of the smallest of these GPUs, when every node says (``None``: unknown)."""
    sizes = [n.gpu_memory_gb for n in pool if n.node_id in set(nodes)]
    if not sizes or any(s is None for s in sizes):
        return None
    return min(float(s or 0) for s in sizes) * 1e9


def run_precisions(pool: Sequence[NodeInfo], nodes: tuple[str, ...]) -> tuple[str, ...]:
    """The precisions every one of these GPUs runs (their kinds', ``orchestrator.kinds``), in
    the order a job falls back to them."""
    on = set(nodes)
    each = [precisions(n.kind) for n in pool if n.node_id in on]
    if not each:
        return precisions("")
    return tuple(p for p in each[0] if all(p in other for other in each[1:]))


def all_virtual(pool: Sequence[NodeInfo], nodes: tuple[str, ...]) -> bool:
    """Whether the job's GPUs are CPU-backed slots."""
    virtual = {n.node_id for n in pool if n.virtual}
    return all(n in virtual for n in nodes)


def is_bulk_run(run: Run) -> bool:
    """A run of a bulk job (not a tuning gang): the runs whose progress the loop reads."""
    return run.launch.kind == "run" and run.launch.spec.job_class == "bulk"


def is_service_run(run: Run) -> bool:
    """A run of a service (a job with ``serve:``; not a tuning gang): it keeps no state a
    stop would save (it has no checkpoint; a relaunch goes on where its stream is)."""
    return run.launch.kind == "run" and run.launch.spec.serve is not None


def where(nodes: tuple[str, ...]) -> str:
    """``"2 GPU(s) on 1a2b3c4d"`` style summary of a gang's nodes."""
    return ", ".join(f"{nodes.count(n)} GPU(s) on {n[:8]}" for n in dict.fromkeys(nodes))
