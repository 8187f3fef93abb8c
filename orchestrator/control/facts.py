"""What the control loop knows about jobs beyond their records, for the snapshot.

The stored fields of a job (``JobStore.queue_facts``) become its facts (a :class:`QueuedJob`);
an elastic job's sizes and speedup curve come from its running settings and its profile (the tuner's
prediction, then what its runs measured on each size), read once and refreshed when a run
reports a new throughput; a run's progress reports give its first step, last checkpoint and
remaining work. Store reads only: nothing here writes job state.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from orchestrator import elastic
from orchestrator.control.ledger import Run
from orchestrator.control.snapshot import RunFacts, job_facts, running_view
from orchestrator.errors import JobNotFound
from orchestrator.kinds import job_speeds, min_speed, predicted
from orchestrator.runtime.base import RunKind
from orchestrator.runtime.harness_config import run_spec
from orchestrator.sla import profile_points
from orchestrator.spec import JobSpec
from orchestrator.store import JobStore
from orchestrator.store.history import read_history
from orchestrator.store.records import JobRecord
from orchestrator.tuner.replan import Replan, replanned_spec
from policies import QueuedJob, RunningJob

__all__ = [
    "PROGRESS",
    "JobFactsReader",
    "at_or_after",
    "remaining_s",
    "running_views",
    "tuned_of",
]

PROGRESS: tuple[str, ...] = ("first_step_at", "checkpoint_at", "step", "total_steps")
PROGRESS += ("global_batch", "samples_per_s", "data_wait_share", "time_left_s")
"""The worker's reports a snapshot reads for each running bulk job."""

Elastic = tuple[JobSpec, tuple[float, ...]]


class JobFactsReader:
    """Builds jobs' facts (:class:`QueuedJob`) from the store, caching each elastic job's spec
    and curve.

    Args:
        store: the job store.
    """

    def __init__(self, store: JobStore) -> None:
        self.store = store
        self._elastic: dict[str, Elastic] = {}
        self._sizes: dict[str, list[int]] = {}
        # GPU kinds: the pool's kinds and their speeds (the loop sets them each round), and
        # each job's measured throughput per GPU per kind, read once (then on a new one)
        self.priors: dict[str, float] = {}
        self._kinds: dict[str, tuple[dict[str, float], dict[str, dict[int, float]]]] = {}

    def _measured_kinds(self, job_id: str) -> tuple[dict[str, float], dict[str, dict[int, float]]]:
        measured = self._kinds.get(job_id)
        if measured is None:
            measured = self._kinds[job_id] = self.store.scaling.kinds(job_id)
        return measured

    def with_kinds(self, facts: QueuedJob, ceiling: str) -> QueuedJob:
        """``facts`` with the job's speed per kind its runs measured (``kind_speed``,
        ``orchestrator.kinds.job_speeds``) and, for an interactive job with a latency
        ``ceiling`` (``"PERCENTILE MS"``), the slowest speed that meets it (``min_speed``);
        unchanged in a pool of one kind."""
        if len(self.priors) < 2:
            return facts
        rates, lats = self._measured_kinds(facts.job_id)
        if not rates and not lats:
            return facts
        speeds = job_speeds(rates, self.priors)
        need = 0.0
        if ceiling and lats:
            pct, ms = ceiling.split()
            need = min_speed(lats, {**self.priors, **speeds}, int(pct), float(ms))
        return dataclasses.replace(facts, kind_speed=tuple(sorted(speeds.items())), min_speed=need)

    def kind_speed(self, job_id: str) -> tuple[tuple[str, float], ...]:
        """The job's speed per GPU on each kind its runs were measured on, in the kinds' unit
        (``orchestrator.kinds.job_speeds``); empty in a pool of one kind."""
        if len(self.priors) < 2:
            return ()
        rates, _ = self._measured_kinds(job_id)
        return tuple(sorted(job_speeds(rates, self.priors).items()))

    def note_kind(self, job_id: str, kind: str, result: dict[str, Any]) -> str:
        """Keep the throughput per GPU (and the step time percentiles) a run showed on GPUs
        of ``kind``; returns what the prediction for that kind was against it (``""``: nothing
        predicted or measured), the first time the job is measured there: from then on the
        measurement is used."""
        sps, world = result.get("samples_per_s"), result.get("world_size")
        lat = {p: float(v) for p in (50, 95, 99) if (v := result.get(f"p{p}_ms"))}
        if not kind or (not lat and (not sps or not world)):
            return ""
        per_gpu = float(sps) / int(world) if sps and world else 0.0
        rates, lats = self._measured_kinds(job_id)
        before = predicted(kind, rates, self.priors) if kind not in rates else None
        self.store.scaling.record_kind(job_id, kind, per_gpu, lat)
        self._kinds[job_id] = (
            {**rates, kind: per_gpu} if per_gpu > 0 else rates,
            {**lats, kind: lat} if lat else lats,
        )
        if before is None or per_gpu <= 0:
            return ""
        error = before / per_gpu - 1
        return (
            f"on {kind}: predicted {before:,.1f} samples/s per GPU from "
            f"{', '.join(sorted(rates))} by the kinds' speeds, measured {per_gpu:,.1f} "
            f"(prediction error {error:+.0%}); measured from now on"
        )

    def queued(self, raw: dict[str, str]) -> QueuedJob:
        """A queued job's facts from its stored fields, an elastic one with its curve and
        the sizes it can run on (:meth:`sizes`), asking for its tuned size (the policy may
        give it more); an interactive job with a GPU range (a service) asks for the GPUs it
        runs on: its tuned replicas, within its range (its stored count is the one it was
        submitted with)."""
        facts = self.with_kinds(stored_facts(raw), raw.get("latency_ceiling", ""))
        if facts.min_gpus != facts.max_gpus and facts.job_class == "bulk":
            info = self.elastic(facts.job_id)
            sizes = self.sizes(facts.job_id)
            if info is not None and sizes:
                tuned = min(max(info[0].gpus, sizes[0]), sizes[-1])
                facts = dataclasses.replace(
                    facts, gpus=tuned, min_gpus=sizes[0], max_gpus=sizes[-1], speedup=info[1]
                )
        elif facts.min_gpus != facts.max_gpus:
            self.forget(facts.job_id)  # tuned (or re-tuned) since it last queued, maybe
            info = self.elastic(facts.job_id)
            if info is not None:
                gpus = min(max(info[0].gpus, facts.min_gpus), facts.max_gpus)
                facts = dataclasses.replace(facts, gpus=gpus)
        return facts

    def running(self, rec: JobRecord, kind: RunKind) -> QueuedJob:
        """A job's facts while a run of it holds GPUs: an elastic job with the sizes its
        running settings can keep their global batch on and its curve; a tuning gang rigid,
        and a service too (its size moves only as the SLA guard asks: ``want_gpus``)."""
        (raw,) = self.store.queue_facts([rec.id]) or [_record_fields(rec)]
        facts = self.with_kinds(stored_facts(raw), raw.get("latency_ceiling", ""))
        info = self.elastic(rec.id) if kind == "run" else None
        if info is None or facts.min_gpus == facts.max_gpus or facts.job_class != "bulk":
            return dataclasses.replace(facts, min_gpus=0, max_gpus=0, speedup=())
        sizes = self.sizes(rec.id) or [facts.min_gpus, facts.max_gpus]
        return dataclasses.replace(facts, min_gpus=sizes[0], max_gpus=sizes[-1], speedup=info[1])

    def sizes(self, job_id: str) -> list[int]:
        """The GPU counts an elastic job can run on, ascending (empty: not one).

        Those on which :meth:`sized` finds a config: the rule's (tp and pp kept, or without a
        plan the micro-batch) and every size the job's profile measured or its plan model can
        choose a config for, so a ``pp 2`` job whose tuning measured one GPU may shrink to one.
        Without the GPUs' memory (known at launch), where :meth:`sized` may still leave a plan
        out.
        """
        if job_id not in self._sizes:
            info = self.elastic(job_id)
            if info is None:
                return []
            spec = info[0]
            profile = self.store.profiles.load(job_id)
            lo, hi = spec.resources.gpus.min, spec.resources.gpus.upper
            self._sizes[job_id] = [
                n for n in range(lo, hi + 1) if replanned_spec(spec, n, profile).spec
            ]
        return self._sizes[job_id]

    def elastic(self, job_id: str) -> Elastic | None:
        """An elastic job's spec (as it runs, at its requested size) and speedup curve."""
        if job_id not in self._elastic:
            try:
                rec = self.store.get(job_id)
                spec = run_spec(rec.spec, tuned_of(rec))
            except (JobNotFound, ValidationError, ValueError):
                return None
            self._elastic[job_id] = (spec, elastic.speedup_curve(spec, self._measured(job_id)))
        return self._elastic[job_id]

    def sized(
        self,
        rec: JobRecord,
        gpus: int,
        memory_bytes: float | None = None,
        precisions: Sequence[str] | None = None,
    ) -> Replan:
        """The spec a run of the job on ``gpus`` GPUs has: tuned settings, and on another size
        than its requested one the plan its profile picks there (``tuner.replan``: a trial at
        that size, else the plan model, else the rule that keeps tp and pp); on GPUs without
        its precision (``precisions``: what they run, in fallback order), one they have.

        Raises:
            ValueError: no plan keeps its global batch on ``gpus`` GPUs.
        """
        spec = run_spec(rec.spec, tuned_of(rec))
        profile = self.store.profiles.load(rec.id)
        plan = replanned_spec(spec, gpus, profile, memory_bytes, precisions)
        if plan.spec is None:
            raise ValueError(f"cannot keep the global batch on {gpus} GPUs ({plan.reason})")
        return plan

    def cached(self, job_id: str) -> Elastic | None:
        """The elastic spec and curve already read for the job (no store read)."""
        return self._elastic.get(job_id)

    def forget(self, job_id: str) -> None:
        """Read the job afresh next time (tuned settings or a new profile)."""
        self._elastic.pop(job_id, None)
        self._sizes.pop(job_id, None)

    def keep_only(self, job_ids: set[str]) -> None:
        """Forget every job not in ``job_ids`` (those that left the queue and the pool)."""
        self._elastic = {j: v for j, v in self._elastic.items() if j in job_ids}
        self._sizes = {j: v for j, v in self._sizes.items() if j in job_ids}
        self._kinds = {j: v for j, v in self._kinds.items() if j in job_ids}

    def note_throughput(self, job_id: str, result: dict[str, Any]) -> tuple[float, ...] | None:
        """Keep the throughput a run of an elastic job showed on its GPU count; returns its
        new speedup curve (``None``: not an elastic job, or nothing measured)."""
        info = self._elastic.get(job_id)
        sps, world = result.get("samples_per_s"), result.get("world_size")
        if info is None or not sps or not world:
            return None
        self.store.scaling.record(job_id, int(world), float(sps))
        curve = elastic.speedup_curve(info[0], self._measured(job_id))
        self._elastic[job_id] = (info[0], curve)
        return curve

    def _measured(self, job_id: str) -> dict[int, float]:
        """Samples/s per GPU count: what runs of the job measured, else what the tuner
        predicted (its profile)."""
        measured = self.store.scaling.read(job_id)
        for gpus, sps in profile_points(self.store.profiles.load(job_id)).items():
            measured.setdefault(gpus, sps)
        return measured


def stored_facts(raw: dict[str, str]) -> QueuedJob:
    """A job's facts from its stored fields (see ``JobStore.queue_facts``)."""

    def num(name: str) -> float | None:
        v = raw.get(name)
        return float(v) if v not in (None, "") else None

    wait = num("wait_target_s")
    return job_facts(
        raw["id"],
        raw["class"],
        raw["team"],
        int(raw["gpus"]),
        int(raw["seq"]),
        float(raw["submitted_at"]),
        min_gpus=int(raw.get("gpus_min") or 0),
        max_gpus=int(raw.get("gpus_max") or 0),
        deadline_s=num("deadline_s"),
        gpu_memory_gb=num("gpu_memory_gb"),
        gpu_kinds=tuple((raw.get("gpu_kinds") or "").split()),
        exclude_kinds=tuple((raw.get("exclude_gpu_kinds") or "").split()),
        history=read_history(raw),
        **({} if wait is None else {"wait_target_s": wait}),
    )


def _record_fields(rec: JobRecord) -> dict[str, str]:
    """The facts a record carries itself (a job deleted meanwhile: no stored facts left)."""
    return {
        "id": rec.id,
        "class": rec.job_class,
        "team": rec.team,
        "gpus": str(rec.gpus),
        "seq": str(rec.seq),
        "submitted_at": str(rec.submitted_at),
    }


def tuned_of(rec: JobRecord) -> dict[str, Any] | None:
    """The tuner's chosen config of a job (``None``: not tuned)."""
    raw = rec.fields.get("tuned")
    if not raw:
        return None
    value = json.loads(raw)
    return value if isinstance(value, dict) else None


def remaining_s(progress: dict[str, Any]) -> float | None:
    """Seconds of work left: for a run for a set time, what is left of it; else at the rate
    last measured, steps left x global batch / samples/s (``None`` when the run reported no
    rate or no total).

    The reported samples/s counts the timed steps alone; the run also waits for its data
    between them (``data_wait_share`` of the time), so the wall-clock rate the work goes at is
    ``samples/s x (1 - data_wait_share)``.
    """
    left = progress.get("time_left_s")
    if isinstance(left, int | float):
        return max(0.0, float(left))
    total, step = progress.get("total_steps"), progress.get("step")
    batch, rate = progress.get("global_batch"), progress.get("samples_per_s")
    if not total or step is None or not batch or not rate:
        return None
    wait = progress.get("data_wait_share")
    wall_rate = float(rate) * (1.0 - float(wait) if isinstance(wait, int | float) else 1.0)
    if wall_rate <= 0:
        return None
    return max(0.0, (float(total) - float(step)) * float(batch) / wall_rate)


def at_or_after(value: Any, start: float) -> float | None:
    """A reported time if it belongs to the run that started at ``start`` (else ``None``)."""
    if isinstance(value, int | float) and value >= start - 1.0:
        return float(value)
    return None


def running_views(
    runs: list[Run],
    facts: dict[str, QueuedJob],
    progress: dict[str, dict[str, Any]],
    urgent: set[str],
    want: dict[str, int],
) -> list[RunningJob]:
    """Running jobs' views: their facts (read at start) and their current run's progress as
    their workers last reported it; a run whose first step is reported is marked ``stepped``.

    Args:
        runs: the runs that stay (not leaving).
        facts: each running job's facts, read when its run started (a job with none is left
            out).
        progress: each bulk run's last ``PROGRESS`` reports.
        urgent, want: the SLA guard's urgent jobs and the replicas it asks for.
    """
    views = []
    for run in runs:
        job = facts.get(run.job_id)
        if job is None:
            continue
        p = progress.get(run.job_id, {})
        started = run.launched_at
        first = at_or_after(p.get("first_step_at"), started)
        run.stepped = run.stepped or first is not None
        views.append(
            running_view(
                _with_remaining(job, remaining_s(p)),
                RunFacts(
                    run.policy_nodes,
                    started_at=started,
                    checkpoint_at=at_or_after(p.get("checkpoint_at"), started),
                    first_step_at=first if run.launch.kind == "run" else started,
                    urgent=run.job_id in urgent,
                    want_gpus=want.get(run.job_id, 0),
                    tuning=run.launch.kind == "tune",
                ),
            )
        )
    return views


def _with_remaining(facts: QueuedJob, remaining: float | None) -> QueuedJob:
    """The facts with the work left that the run's progress measured (if it did)."""
    if remaining is None or remaining == facts.remaining_work:
        return facts
    return dataclasses.replace(facts, remaining_work=remaining)
