"""The reap phase's steps: a run's workers came up (its job is running or tuning), a service's
resize in place is done (its run holds its new GPUs: the ledger, its placement and its guard
follow), or a run ended (its job's next state from the pure table in
:mod:`~orchestrator.control.transitions`, written with the fields it ends with: attained
service, restarts, remaining work, its result; a finished job's message says whether it met
its SLA and how far the tuner's prediction was).

:class:`Reaper` is a collaborator of :class:`~orchestrator.control.loop.ControlLoop` that turns
the runtime's events into job transitions: it is handed the loop's
:class:`~orchestrator.control.state.LoopState` (it removes a run that ended), the store, and
the gang actions (:class:`~orchestrator.control.gangs.GangActions`), through which it stops a
run whose job was cancelled meanwhile and relaunches a resized one. :func:`ended_fields` (what
an ended run writes) is pure.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from orchestrator.control.facts import PROGRESS, JobFactsReader, remaining_s, tuned_of
from orchestrator.control.gangs import GangActions, where
from orchestrator.control.ledger import ACTIVE, Run
from orchestrator.control.sla_guard import SLAGuard
from orchestrator.control.state import LoopState
from orchestrator.control.telemetry import LoopTelemetry
from orchestrator.control.transitions import StopReason, Transition, run_ended
from orchestrator.elastic import resized_spec
from orchestrator.errors import IllegalTransition, JobNotFound
from orchestrator.runtime.base import EventKind, Outcome, OutcomeKind, RunEvent
from orchestrator.sla import evaluate_sla
from orchestrator.store import JobStore
from orchestrator.store.history import history_fields
from orchestrator.store.records import JobRecord
from orchestrator.store.states import TERMINAL, JobState
from policies.history import RunEnd, advance

log = logging.getLogger(__name__)

__all__ = ["Reaper", "ended_fields", "metrics_of"]


class Reaper:
    """What the loop does with a run's events (see the module doc).

    Args:
        state: the loop's runs (an ended one is removed) and its jobs' facts.
        store: the job store (transitions, metrics, the profiles a prediction is checked on).
        gangs: the gang actions (a stop, a relaunch).
        facts: notes a run's measured throughput (the job's speedup curve).
        telemetry: the loop's counters.
        sla_guard: watches a resized service, forgets a job whose run ended.
        clock: wall clock (seconds).
    """

    def __init__(
        self,
        state: LoopState,
        store: JobStore,
        gangs: GangActions,
        *,
        facts: JobFactsReader,
        telemetry: LoopTelemetry,
        sla_guard: SLAGuard,
        clock: Callable[[], float],
    ) -> None:
        self.state = state
        self.store = store
        self.gangs = gangs
        self.facts = facts
        self.telemetry = telemetry
        self.sla_guard = sla_guard
        self.clock = clock

    def reap(self, events: list[RunEvent]) -> None:
        """Turn the runtime's events into job transitions, in the order they happened."""
        runs = self.state.runs
        for event in events:
            run = runs.get(event.job_id)
            if run is None or run.launch.serial != event.launch:
                continue  # an earlier run of the job, already settled
            if event.kind is EventKind.STARTED:
                self._started(run, event.at)
            elif event.kind is EventKind.RESIZED:
                self._resized(run, event.nodes, event.at)
            elif event.kind is EventKind.REPLACED:
                self._replaced(run, event.outcome)
            else:
                del runs[event.job_id]
                self._ended(run, event.outcome or Outcome(OutcomeKind.LOST, "no outcome"), event.at)

    def _started(self, run: Run, at: float) -> None:
        """A run's workers are up: the job is running (or tuning); a job cancelled meanwhile
        has its run stopped."""
        if run.started:
            return
        run.started = True
        target = JobState.TUNING if run.launch.kind == "tune" else JobState.RUNNING
        try:
            self.store.transition(
                run.job_id, target, expect=JobState.PLACED, fields={"started_at": at}
            )
        except (IllegalTransition, JobNotFound):  # cancelled (or deleted) meanwhile
            self.gangs.stop(run, StopReason.CANCEL, "cancelled")
            return
        if target is JobState.RUNNING:
            self.store.incr_attempts(run.job_id)

    def _resized(self, run: Run, nodes: tuple[str, ...], at: float) -> None:
        """A service's resize in place is done: its run holds ``nodes`` from ``at`` (the
        replicas it drained gave their GPUs back), its job running throughout. The ledger
        takes the new GPUs (its spec sized to them), the record its placement, with a
        ``scaled`` event, and the SLA guard its new size."""
        if run.resize_to is None or run.stop is not None:
            return  # being stopped meanwhile: its end settles it
        before = len(run.nodes)
        spec = resized_spec(run.launch.spec, len(nodes)) or run.launch.spec
        run.resized(dataclasses.replace(run.launch, nodes=nodes, spec=spec), at)
        message = f"scaled from {before} to {len(nodes)} replicas, serving throughout"
        log.info("%s: %s (%s)", run.job_id, message, where(nodes))
        placement = {"nodes": list(nodes), "strategy": run.launch.strategy}
        try:
            self.store.set_placement(
                run.job_id, placement, expect=JobState.RUNNING, message=message
            )
            rec = self.store.get(run.job_id)
        except (IllegalTransition, JobNotFound):  # being cancelled: its run is stopped next
            return
        self.sla_guard.watch(rec, spec, len(nodes))

    def _replaced(self, run: Run, outcome: Outcome | None) -> None:
        """A service's replica failed or was lost and another took its GPU, the others serving
        throughout: the job's events say so (its state, GPUs and verdict do not change)."""
        why = outcome.message if outcome is not None else "lost"
        kind = outcome.kind.value if outcome is not None else "lost"
        message = f"a replica {kind}: {why}"
        log.warning("%s: %s", run.job_id, message)
        with contextlib.suppress(JobNotFound):
            self.store.note_event(run.job_id, "replica-replaced", message, as_message=False)

    def _ended(self, run: Run, outcome: Outcome, at: float) -> None:
        """Record how a run ended: the job's next state (re-deciding if a cancel races in),
        its attained service, metrics and measured throughput; a resized run goes on."""
        job_id = run.job_id
        curve = self.facts.note_throughput(job_id, outcome.result)
        if run.launch.kind == "run" and len(self.facts.priors) > 1:  # a pool of several kinds
            kinds = {n.node_id: n.kind for n in self.state.nodes}
            on = {kinds.get(n, "") for n in run.launch.nodes}
            if len(on) == 1 and (note := self.facts.note_kind(job_id, on.pop(), outcome.result)):
                with contextlib.suppress(JobNotFound):
                    self.store.note_event(job_id, "kind-profile", note, as_message=False)
        if run.launch.kind == "tune":
            self.telemetry.tuned(outcome.result.get("trials"))
        running = self.state.facts
        if curve is not None and job_id in running:
            running[job_id] = dataclasses.replace(running[job_id], speedup=curve)
        if outcome.result:
            self.store.put_metrics(job_id, metrics_of(outcome.result))
        for _ in range(3):
            try:
                rec = self.store.get(job_id)
            except JobNotFound:
                return
            if rec.state not in ACTIVE:
                return
            t = run_ended(
                rec.state,
                run.launch.kind,
                outcome,
                run.stop,
                started=run.started,
                losses=rec.history.losses,
                stop_note=run.stop_note,
            )
            progress = (
                self.store.latest_metrics([rec.id], PROGRESS).get(rec.id, {})
                if t.target is JobState.QUEUED
                else {}
            )
            fields = ended_fields(rec, run, t, outcome, at, progress)
            try:
                self._settle(job_id, t, rec, fields, outcome)
            except IllegalTransition:
                continue  # the state moved (a cancel): decide again on the new one
            held = run.held_gpu_s(at)  # this run's GPU-seconds
            self.telemetry.used(rec.team, held)  # the team's account, kept past the job's gc
            self.state.forget(job_id)
            self.sla_guard.forget(job_id)
            if t.relaunch and run.resize_to:
                self.gangs.relaunch(rec, run)
            return
        log.warning("%s: could not record its outcome %s", job_id, outcome.kind.value)

    def _settle(
        self,
        job_id: str,
        t: Transition,
        rec: JobRecord,
        fields: dict[str, Any],
        outcome: Outcome,
    ) -> None:
        message = t.message
        if t.target is JobState.FINISHED:
            message = self._sla_message(rec) + self._prediction_error(rec, outcome.result)
        self.store.transition(job_id, t.target, expect=rec.state, message=message, fields=fields)
        log.info("%s: %s%s", job_id, t.target.value, f" ({message})" if message else "")

    def _prediction_error(self, rec: JobRecord, result: dict[str, Any]) -> str:
        """For a tuned job that ran as tuned: how far the tuner's prediction was from what the
        run measured (kept in its profile). A run resized to another GPU count ran another
        config (its micro-batch was re-derived), so its figures are not compared."""
        if not rec.fields.get("tuned") or not result:
            return ""
        tuned = tuned_of(rec) or {}
        if int(tuned.get("gpus", 1)) != int(result.get("world_size", 1)):
            return ""
        from orchestrator.tuner.profile import record_outcome

        errors = record_outcome(self.store.profiles, rec.id, result)
        if not errors:
            return ""
        parts = [f"{k.removesuffix('_ms').replace('_', ' ')} {v:+.0%}" for k, v in errors.items()]
        return f"; tuner prediction error: {', '.join(parts)}"

    def _sla_message(self, rec: JobRecord) -> str:
        verdict = evaluate_sla(
            rec.spec,
            self.store.judged_metrics(rec),
            elapsed_s=self.clock() - rec.submitted_at,
            finished=True,
        )
        self.telemetry.finished(rec.job_class, verdict.met)
        met = {True: "SLA met", False: "SLA missed", None: "SLA not measured"}[verdict.met]
        return f"{met}: {verdict.measured} (target {verdict.target})"


def ended_fields(
    rec: JobRecord,
    run: Run,
    t: Transition,
    outcome: Outcome,
    at: float,
    progress: dict[str, Any],
) -> dict[str, Any]:
    """The fields written with an ended run's transition: the pure table's, and the job's
    history advanced by the one rule the simulator follows too (``policies.history``:
    attained service, restarts, most GPUs; for a requeued job its work left, preemption time
    and re-tunes; a lost run), written where it changed.

    Args:
        progress: the run's last progress reports (``PROGRESS``), read for a requeued job.
    """
    fields = dict(t.fields)
    requeued = t.target is JobState.QUEUED
    retune = run.stop is StopReason.RETUNE and run.retune is not None
    before = rec.history
    end = RunEnd(
        at=at,
        gpus=run.most_gpus,
        held_s=at - run.launched_at,
        gpu_s=run.held_gpu_s(at),
        trained=run.launch.kind == "run" and run.started,  # a training run, not a tuning one
        goes_on=requeued or t.relaunch,  # its next run restarts
        requeued=requeued,
        preempted=run.stop is StopReason.PREEMPT,
        # a run for a set time: what is left of it, time_left_s (its run time so far is in
        # its checkpoint, so the resumed run trains only for that; a run killed without a
        # stop checkpoint resumes from an older one, with a little more left); none
        # measured: the estimate it had, from its submission (a bound, as the run may have
        # done some of the work)
        remaining_work=remaining_s(progress) if requeued else None,
        # the guard's bound counts its own re-tunes, not those a user asked for
        retune=retune and not (run.retune or {}).get("asked"),
        lost=t.lost,
    )
    fields.update(history_fields(advance(before, end), before))
    if requeued and retune:
        fields["retune"] = run.retune
    if t.relaunch and run.resize_to:
        fields["placement"] = {"nodes": list(run.resize_to), "strategy": run.launch.strategy}
    if t.target in TERMINAL:
        fields["finished_at"] = at
        if outcome.result:
            fields["result"] = outcome.result
    return fields


def metrics_of(result: dict[str, object]) -> dict[str, object]:
    """The scalar metrics of a harness result (``p95_ms``, ``samples_per_s``...)."""
    return {k: v for k, v in result.items() if isinstance(v, int | float | str)}
