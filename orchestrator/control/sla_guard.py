"""The control loop's SLA guard phase: the I/O around :mod:`orchestrator.control.guard`.

Each round (:meth:`SLAGuard.check`) it reads every running job's latest worker report (one
pipelined read for all of them), runs the pure judgement, and records what tripped or cleared
as an event on the job (``sla-at-risk``, ``sla-violated``, ``sla-recovered``: ``orch show``
lists them) and a ``/metrics`` count. It keeps which elastic jobs are urgent (the snapshot's
``RunningJob.urgent``) and returns the runs to stop for a re-tune, with the measured point the
re-tune starts from set on the run; the loop stops them (it alone acts on runs). A re-tune a
job's team asks for (:meth:`SLAGuard.requested`) takes the same path.

A service with a GPU range is also scaled (issue 24): each round its window (tail, offered
load, busy share) goes through the pure decision of :mod:`policies.replicas`, bounded by its
range and what its team's quota leaves; the replicas it asks for are kept in ``want`` (the
snapshot's ``RunningJob.want_gpus``: the policy resizes the service, the loop relaunches it,
or resizes it in place when it has an endpoint)
and said in a ``guard`` event (``orch show``), with the reason.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any

import redis

from orchestrator.control.facts import at_or_after, tuned_of
from orchestrator.control.guard import (
    GUARD_KEYS,
    Check,
    Finding,
    GuardConfig,
    Reading,
    Targets,
    Watch,
    actions,
    assess,
    reading_of,
)
from orchestrator.control.ledger import Run
from orchestrator.control.telemetry import LoopTelemetry
from orchestrator.elastic import resizable
from orchestrator.errors import JobNotFound
from orchestrator.runtime.base import in_place
from orchestrator.spec import JobSpec
from orchestrator.store import JobStore
from orchestrator.store.records import JobRecord
from orchestrator.tuner.profile import expected, record_live
from policies.replicas import (
    ReplicaConfig,
    ScaleWatch,
    ServiceLimits,
    ServiceReading,
    scale_replicas,
)

log = logging.getLogger(__name__)

__all__ = ["CHECK_EVERY_S", "READY_WAIT_S", "SETTLE_S", "SLAGuard"]

CHECK_EVERY_S = 0.5
"""The shortest gap between two checks: workers report once a second, so reading their reports
in every round (rounds come every 50 ms when submissions flood in) would only re-read them."""

SETTLE_S = 5.0
"""Seconds a service resized in place is left alone once every replica it holds is ready: a
replica's busy share is measured over its last 5 s (``workers.serve_run.LOAD_WINDOW_S``), and
the load rule scales it by the replicas the run holds. Until a scale-up's replica serves, and
for a window after, the replica that carried the load alone reads ~100% busy, times the new
count: a need that is neither count's, which scaled a service 1 -> 2 -> 3 where 2 carried its
load (``bench/serving/README.md``)."""
READY_WAIT_S = 60.0
"""The longest a resize waits for its replicas to be ready before the guard decides again
anyway: a replica that never gets ready (replaced over and over) must not freeze the scaling."""

Retune = tuple[Run, str]
"""A run to stop for a re-tune, and why (the stop's note)."""

SERVICE_KEYS: tuple[str, ...] = (
    "window_offered_rps",
    "window_served_rps",
    "window_busy",
    "time_left_s",
)
"""A service's load figures the scaling reads, and what is left of its stream
(``workers.serve_run``)."""


class SLAGuard:
    """Watches running jobs against their SLA (see the module doc).

    Args:
        store: the job store.
        telemetry: the loop's ``/metrics`` recorder.
        config: the guard's thresholds.

    Attributes:
        urgent: elastic jobs short of their floor or deadline, as of the last check.
        want: the replicas asked of each scaled service whose run has not been resized yet.
        scaling: the scaling thresholds (the up hold is the guard's ``hold_s``, the down hold
            twice that: scaling down is never urgent).
    """

    def __init__(self, store: JobStore, telemetry: LoopTelemetry, config: GuardConfig) -> None:
        self.store = store
        self.telemetry = telemetry
        self.config = config
        self.urgent: set[str] = set()
        self.want: dict[str, int] = {}
        self.scaling = ReplicaConfig(up_hold_s=config.hold_s, down_hold_s=2 * config.hold_s)
        self._targets: dict[str, tuple[Targets, int]] = {}  # (targets, re-tunes so far)
        self._watch: dict[str, tuple[int, Watch]] = {}  # (run serial, hysteresis state)
        self._services: dict[str, ServiceLimits] = {}  # scaled services, as their run started
        self._scaled: dict[str, tuple[int, ScaleWatch, bool]] = {}  # (serial, state, capped said)
        # (the resize's time, when the guard saw it, when all its replicas were ready)
        self._ready_at: dict[str, tuple[float, float, float | None]] = {}
        self._checked = -float("inf")  # the clock of the last check

    def watch(self, rec: JobRecord, spec: JobSpec, gpus: int) -> None:
        """A run of the job started on ``gpus`` GPUs with ``spec`` (its running settings)."""
        retunes = rec.history.retunes
        self._targets[rec.id] = (self._targets_of(rec, spec, gpus), retunes)
        self.want.pop(rec.id, None)  # the new run is the size it was asked for
        lat = spec.sla.latency
        if spec.serve is not None and resizable(spec) and lat is not None:
            r = spec.resources.gpus
            self._services[rec.id] = ServiceLimits(
                gpus, r.min, r.upper, None, lat.percentile, lat.max_ms
            )

    def forget(self, job_id: str) -> None:
        """The job's run ended."""
        self._targets.pop(job_id, None)
        self._watch.pop(job_id, None)
        self._services.pop(job_id, None)
        self._scaled.pop(job_id, None)
        self._ready_at.pop(job_id, None)
        self.want.pop(job_id, None)

    def check(self, runs: Mapping[str, Run], now: float) -> list[Retune]:
        """The running jobs' latest reports judged (at most every :data:`CHECK_EVERY_S`;
        ``urgent`` stays as it was in between); returns the runs to stop for a re-tune."""
        # a service being resized in place is judged again once it holds its new GPUs
        watched = [
            r
            for r in runs.values()
            if r.started
            and r.stop is None
            and r.resize_to is None
            and r.launch.kind == "run"
            and r.job_id in self._targets
        ]
        if not watched:
            self.urgent = set()
            return []
        if now - self._checked < CHECK_EVERY_S:
            return []
        self._checked = now
        keys = GUARD_KEYS + SERVICE_KEYS if self._services else GUARD_KEYS
        reports = self.store.latest_metrics([r.job_id for r in watched], keys)
        rooms = self._quota_rooms(runs) if self._services else {}
        urgent: set[str] = set()
        retunes: list[Retune] = []
        for run in watched:
            report = reports.get(run.job_id)
            # a report of an earlier run of the job is not this run's
            if not report or at_or_after(report.get("first_step_at"), run.launched_at) is None:
                continue
            targets, done = self._targets[run.job_id]
            serial, watch = self._watch.get(run.job_id, (run.launch.serial, Watch()))
            if serial != run.launch.serial:
                watch = Watch()
            reading = reading_of(report, targets, now)
            watch, findings = assess(targets, reading, watch, self.config)
            self._watch[run.job_id] = (run.launch.serial, watch)
            for f in findings:
                self._found(run.job_id, f)
                if f.check is Check.PROFILE and f.tripped:
                    self._correct(run, reading, now)
            act = actions(targets, watch, done, self.config)
            if act.urgent:
                urgent.add(run.job_id)
            if act.retune:
                why = self._retune(run, reading.samples_per_s, report, findings)
                if why:
                    retunes.append((run, why))
            elif act.note and any(f.check is Check.PROFILE and f.tripped for f in findings):
                self.store.note_event(run.job_id, "guard", f"guard: {act.note}")
            if run.job_id in self._services:
                self._scale(run, report, now, rooms.get(run.launch.spec.team))
        for job_id in urgent - self.urgent:
            self.store.note_event(
                job_id, "guard", "guard: urgent: the policy grows it first when it can"
            )
        self.urgent = urgent
        return retunes

    def requested(self, runs: Mapping[str, Run]) -> list[Retune]:
        """The re-tunes teams asked for since the last round (``orch retune``), as runs to
        stop; a request for a job with no running run is dropped with an event."""
        out: list[Retune] = []
        for job_id in self.store.take_tune_requests():
            run = runs.get(job_id)
            if run is None or not run.started or run.stop is not None or run.launch.kind != "run":
                with contextlib.suppress(JobNotFound):
                    self.store.note_event(
                        job_id, "guard", "guard: re-tune not done: the job was not running"
                    )
                continue
            report = self.store.latest_metrics([job_id], GUARD_KEYS).get(job_id, {})
            rate = report.get("window_samples_per_s")
            why = self._retune(
                run, float(rate) if isinstance(rate, int | float) else None, report, [], "asked"
            )
            if why:
                out.append((run, why))
        return out

    def _quota_rooms(self, runs: Mapping[str, Run]) -> dict[str, int]:
        """GPUs each capped team (``max_gpus``) may still take, by what its runs hold."""
        config = self.store.teams()
        caps = {t.name: t.max_gpus for t in config.views()} if config is not None else {}
        held: dict[str, int] = {}
        for r in runs.values():
            team = r.launch.spec.team
            held[team] = held.get(team, 0) + len(r.nodes)
        return {t: cap - held.get(t, 0) for t, cap in caps.items() if cap > 0}

    def _scale(self, run: Run, report: dict[str, Any], now: float, room: int | None) -> None:
        """One round of a service's scaling decision (:func:`policies.replicas.scale_replicas`):
        a new replica count goes to ``want`` with an event saying why; a count its bounds
        refuse is said once per run."""
        job_id, serial = run.job_id, run.launch.serial
        base = self._services[job_id]
        # what a relaunch costs it: this run's start, from its launch to its first answer (the
        # caller read only reports of this run; the stop before a relaunch kills it at once)
        first = report.get("first_step_at")
        relaunch = (
            max(0.0, float(first) - run.launched_at) if isinstance(first, int | float) else None
        )
        if in_place(run.launch):  # resized in place: its replicas serve throughout, no gap
            relaunch = 0.0
        limits = ServiceLimits(
            len(run.nodes), base.lo, base.hi, room, base.percentile, base.max_ms, relaunch
        )
        at, watch, said = self._scaled.get(job_id, (serial, ScaleWatch(), False))
        if at != serial:
            watch, said = ScaleWatch(), False
        if not self._settled(run, now):
            # its window is partly of the count before the resize: no decision, and the holds
            # start over on readings of the count it holds now
            self._scaled[job_id] = (serial, ScaleWatch(), said)
            return

        def num(key: str) -> float | None:
            v = report.get(key)
            return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

        reading = ServiceReading(
            now,
            int(num("window_steps") or 0),
            num(f"window_p{base.percentile}_ms"),
            num("window_offered_rps"),
            num("window_served_rps"),
            num("window_busy"),
            num("time_left_s"),
        )
        watch, scale = scale_replicas(limits, reading, watch, self.scaling)
        if scale is not None and scale.replicas == limits.replicas:
            if not said:
                self.store.note_event(job_id, "guard", f"guard: {scale.reason}")
            said = True
        elif scale is not None and self.want.get(job_id) != scale.replicas:
            self.want[job_id] = scale.replicas
            log.info("%s: %s", job_id, scale.reason)
            self.store.note_event(job_id, "guard", f"guard: {scale.reason}")
            up = scale.replicas > limits.replicas
            self.telemetry.guarded("scale-up" if up else "scale-down", "replicas")
        self._scaled[job_id] = (serial, watch, said)

    def _settled(self, run: Run, now: float) -> bool:
        """Whether a service resized in place has had every replica it holds ready for
        :data:`SETTLE_S` (or the guard has waited :data:`READY_WAIT_S` for them since it saw
        the resize): until then its readings are partly of the count before (see
        :data:`SETTLE_S`). Its ready set is read only while it settles; a store error reads
        as not ready yet. Timed on the guard's clock alone (the resize's own time is the
        runtime's)."""
        at = run.resized_at
        if at is None:
            return True
        resize, seen, ready_at = self._ready_at.get(run.job_id, (None, now, None))
        if resize != at:
            seen, ready_at = now, None
        if ready_at is None:
            if now - seen >= READY_WAIT_S:
                ready_at = seen + READY_WAIT_S - SETTLE_S
            else:
                with contextlib.suppress(redis.RedisError):
                    ready = self.store.ready_replicas(run.job_id)
                    ready_at = now if ready >= len(run.nodes) else None
        self._ready_at[run.job_id] = (at, seen, ready_at)
        return ready_at is not None and now - ready_at >= SETTLE_S

    def _found(self, job_id: str, f: Finding) -> None:
        """Record a check that tripped or cleared: an event, a ``/metrics`` count."""
        log.info("%s: %s", job_id, f.describe())
        self.store.note_event(job_id, f"sla-{f.severity}", f.describe())
        self.telemetry.guarded(f.severity, f.check.value)

    def _correct(self, run: Run, reading: Reading, now: float) -> None:
        """The run contradicts its profile: the profile takes what it measures (the scheduler
        and the next runs read that), and the event says so."""
        kept = record_live(
            self.store.profiles,
            run.job_id,
            len(run.nodes),
            reading.samples_per_s,
            reading.latency_ms,
            now,
        )
        if kept is not None:
            self.store.note_event(
                run.job_id,
                "guard",
                "guard: profile corrected from the run's measurements "
                f"({len(run.nodes)} GPU(s): {_figures(kept)})",
            )

    def _retune(
        self,
        run: Run,
        rate: float | None,
        report: dict[str, Any],
        findings: list[Finding],
        asked: str = "",
    ) -> str:
        """Prepare a run's re-tune: the measured point it starts from (on the run), the event
        and count; returns the stop's note (empty: the job cannot be re-tuned)."""
        try:
            tuned = tuned_of(self.store.get(run.job_id))
        except JobNotFound:
            return ""
        if tuned is None:
            self.store.note_event(run.job_id, "guard", "guard: not re-tuned: it runs untuned")
            return ""
        pct = {f"p{q}_ms": report.get(f"window_p{q}_ms") for q in (50, 95, 99)}
        # what it measured is a trial of its tuned config only on the tuned GPU count (on
        # another, its micro-batch was re-derived: another config)
        same = int(tuned.get("gpus", 1)) == len(run.nodes)
        run.retune = {
            "config": tuned,
            "measured": {"samples_per_s": rate, **pct} if same else {},
            "asked": bool(asked),  # by the job's team: not one of the guard's own re-tunes
        }
        seen = next((f for f in findings if f.check is Check.PROFILE), None)
        if seen is not None:
            why = f"measured {seen.measured} against {seen.target}"
        else:
            why = "its team asked" + (f"; it measured {rate:,.1f} samples/s" if rate else "")
        self.telemetry.guarded("retune", Check.PROFILE.value if seen else asked or "asked")
        self.store.note_event(
            run.job_id,
            "guard",
            f"guard: re-tuning from the measured data ({why}); it resumes from its checkpoint "
            "with the new settings if they are predicted to meet the SLA, else with its own",
        )
        return why

    def _targets_of(self, rec: JobRecord, spec: JobSpec, gpus: int) -> Targets:
        """What a run is held to: its SLA, and the tuner's prediction when it runs the tuned
        settings on the tuned GPU count (on another count its micro-batch was re-derived:
        the profile says nothing of that config)."""
        tp, lat = spec.sla.throughput, spec.sla.latency
        floor, unit = None, "samples"
        if tp is not None and tp.min_samples_per_s is not None:
            floor = tp.min_samples_per_s
        elif tp is not None and tp.min_tokens_per_s is not None:
            floor, unit = tp.min_tokens_per_s, "tokens"
        deadline = None
        if tp is not None and tp.deadline_s is not None:
            deadline = rec.submitted_at + tp.deadline_s
        tuned = tuned_of(rec)
        rate = ms = None
        if tuned is not None and int(tuned.get("gpus", 1)) == gpus:
            rate, ms = expected(self.store.profiles.load(rec.id), gpus)
        gpu_range = spec.resources.gpus
        return Targets(
            percentile=lat.percentile if lat is not None else None,
            max_ms=lat.max_ms if lat is not None else None,
            floor=floor,
            floor_unit=unit,
            deadline_at=deadline,
            predicted_rate=rate,
            predicted_ms=ms,
            elastic=spec.job_class == "bulk" and gpu_range.min != gpu_range.upper,
            tuned=tuned is not None,
        )


def _figures(live: dict[str, Any]) -> str:
    """``"5,948.0 samples/s, p95 12.0 ms"`` of what a run measured."""
    parts = []
    if live.get("samples_per_s"):
        parts.append(f"{live['samples_per_s']:,.1f} samples/s")
    if live.get("latency_ms"):
        parts.append(f"{live['latency_ms']:.1f} ms")
    return ", ".join(parts) or "nothing measured"
