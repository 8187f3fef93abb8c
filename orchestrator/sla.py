"""Is a job meeting its SLA? One function, used by `orch show`, the demo table and the scheduler."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.elastic import global_batch, gpu_range, speedup_curve
from orchestrator.spec import JobSpec
from policies import QueuedJob
from policies.scheduling.plan import Timeline, Verdict, plan_jobs


@dataclass(frozen=True)
class SLAVerdict:
    """Whether the SLA is met, with the figures that decided it.

    Attributes:
        met: ``True``/``False``, or ``None`` when there is nothing measured yet.
        target: the SLA in words (``"p95 <= 50 ms"``).
        measured: the measured figure in words (``"p95 38.2 ms"``), or ``"-"``.
    """

    met: bool | None
    target: str
    measured: str


def describe_sla(spec: JobSpec) -> str:
    """The SLA in a few words, for tables."""
    parts: list[str] = []
    tp = spec.sla.throughput
    if tp is not None:
        if tp.min_samples_per_s is not None:
            parts.append(f">= {tp.min_samples_per_s:g} samples/s")
        elif tp.min_tokens_per_s is not None:
            parts.append(f">= {tp.min_tokens_per_s:g} tokens/s")
        else:
            work = f"{tp.work_samples} samples" if tp.work_samples else f"{tp.work_tokens} tokens"
            parts.append(f"{work} in {tp.deadline_s:g} s")
    lat = spec.sla.latency
    if lat is not None:
        parts.append(f"p{lat.percentile} <= {lat.max_ms:g} ms")
    return ", ".join(parts)


def _num(metrics: dict[str, Any], key: str) -> float | None:
    value = metrics.get(key)
    if value is None or value == "":
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def wall_share(metrics: dict[str, Any]) -> float | None:
    """The share of a run's time spent waiting for its data, when that data is the job's own
    (``reads_dataset``: the harness's loader, or a command job's ``job.loader``), else ``None``.

    A run's ``samples_per_s`` counts its timed steps alone: what its tuning trades (micro-batch,
    GPUs, precision) changes it, the data wait beside it does not. A throughput SLA is about
    the rate the job's work goes at, ``samples_per_s x (1 - share)``, so a job that waits on
    its loader is judged at the wall clock. The batches the harness generates for a workload
    without a dataset are its stand-in for a loader (not the job's cost), so their wait is not
    counted. A command job's waits in ``job.loader`` are its own loading, taken out of its
    steps and reported apart (``reads_dataset``); a script that reads no batches through it
    has step times that hold its loading, and no wait figure.
    """
    if metrics.get("reads_dataset") is not True:
        return None
    share = _num(metrics, "data_wait_share")
    return share if share is not None and 0.0 <= share < 1.0 else None


def evaluate_sla(
    spec: JobSpec,
    metrics: dict[str, Any],
    *,
    elapsed_s: float | None = None,
    finished: bool = False,
    ended: str = "",
) -> SLAVerdict:
    """Judge measured metrics against the job's SLA (every stated part must hold).

    Args:
        spec: the job.
        metrics: the latest metrics the harness reported (``p95_ms``, ``samples_per_s``, ...).
        elapsed_s: seconds from submission to completion (or to now), for deadlines.
        finished: whether the job has completed its work (a deadline is judged only then,
            unless it has already passed).
        ended: ``"cancelled"`` or ``"failed"`` when the job ended without finishing: a
            cancelled job gets no verdict (nobody owes it the rest of its work), a failed one
            missed its SLA, whatever it measured while it ran.
    """
    verdicts: list[bool | None] = []
    measured: list[str] = []
    tp = spec.sla.throughput
    if tp is not None:
        if tp.min_samples_per_s is not None or tp.min_tokens_per_s is not None:
            key, floor, unit = (
                ("samples_per_s", tp.min_samples_per_s, "samples/s")
                if tp.min_samples_per_s is not None
                else ("tokens_per_s", tp.min_tokens_per_s, "tokens/s")
            )
            value = _num(metrics, key)
            share = wall_share(metrics)
            if value is not None and share is not None:
                value *= 1.0 - share
                unit = f"{unit} at the wall clock ({share:.0%} waiting for data)"
            verdicts.append(None if value is None else value >= (floor or 0))
            measured.append("-" if value is None else f"{value:,.1f} {unit}")
        elif tp.deadline_s is not None:
            if elapsed_s is None:
                verdicts.append(None)
                measured.append("-")
            elif finished or elapsed_s > tp.deadline_s:
                verdicts.append(finished and elapsed_s <= tp.deadline_s)
                measured.append(f"{'done' if finished else 'running'} at {elapsed_s:.1f} s")
            else:
                verdicts.append(None)
                measured.append(f"running, {elapsed_s:.1f} s elapsed")
    lat = spec.sla.latency
    if lat is not None:
        value = _num(metrics, f"p{lat.percentile}_ms")
        ok = None if value is None else value <= lat.max_ms
        text = "-" if value is None else f"p{lat.percentile} {value:.1f} ms"
        requests = _num(metrics, "requests")
        if requests:  # a service's requests, measured at its ingress over its whole life
            failed = _num(metrics, "requests_failed") or 0.0
            # a failed or timed-out request had no answer in time: past any ceiling, so more
            # of them than the percentile leaves out is a miss whatever the answered ones took
            if failed > requests * (1 - lat.percentile / 100.0):
                ok = False
            text += f" over {requests:,.0f} requests"
            if failed:
                text += f", {failed:,.0f} failed"
            share = _num(metrics, "attainment")
            if share is not None:
                text += f", {share:.0%} of windows met"
        verdicts.append(ok)
        measured.append(text)
    if ended in ("cancelled", "failed"):
        measured.append(ended)
        verdicts = [None] if ended == "cancelled" else [False]
    if any(v is False for v in verdicts):
        met: bool | None = False
    elif verdicts and all(v is True for v in verdicts):
        met = True
    else:
        met = None
    return SLAVerdict(met=met, target=describe_sla(spec), measured=", ".join(measured) or "-")


@dataclass(frozen=True)
class DeadlineCheck:
    """Whether a job's deadline can be met at all, judged at submission.

    Attributes:
        ok: ``False`` when the work cannot be done by the deadline even on all of the job's
            allowed GPUs at its tuned rate; ``None`` when there is no rate to judge by.
        message: one line for the user (empty when ``ok`` is ``True``).
    """

    ok: bool | None
    message: str


def profile_rate(profile: dict[str, Any] | None, max_gpus: int) -> float | None:
    """The best tuned samples/s on at most ``max_gpus`` GPUs in a tuner profile, or ``None``.

    Reads ``chosen.by_gpus`` (measured or predicted per GPU count), else the chosen config's
    own ``measured_samples_per_s`` / ``samples_per_s`` (see ``orchestrator.tuner.profile``).
    """
    chosen = (profile or {}).get("chosen")
    if not isinstance(chosen, dict):
        return None
    rates = [
        float(p["samples_per_s"])
        for p in chosen.get("by_gpus") or []
        if isinstance(p, dict)
        and isinstance(p.get("gpus"), int)
        and p["gpus"] <= max_gpus
        and isinstance(p.get("samples_per_s"), int | float)
        and p["samples_per_s"] > 0
    ]
    if rates:
        return max(rates)
    for key in ("measured_samples_per_s", "samples_per_s"):
        value = chosen.get(key)
        if isinstance(value, int | float) and value > 0:
            return float(value)
    return None


def profile_points(profile: dict[str, Any] | None) -> dict[int, float]:
    """Samples/s per GPU count in a tuner profile: ``chosen.by_gpus`` (measured or predicted
    per size), and the chosen config's own measured rate on its size where ``by_gpus`` has
    none (see ``orchestrator.tuner.profile``). Malformed entries are skipped."""
    chosen = (profile or {}).get("chosen")
    if not isinstance(chosen, dict):
        return {}
    points: dict[int, float] = {}
    for p in chosen.get("by_gpus") or []:
        if not isinstance(p, dict):
            continue
        n, sps = p.get("gpus"), p.get("samples_per_s")
        if isinstance(n, int) and n >= 1 and isinstance(sps, int | float) and sps > 0:
            points.setdefault(n, float(sps))
    measured = chosen.get("measured_samples_per_s")
    n = (chosen.get("config") or {}).get("gpus", 1)
    if isinstance(measured, int | float) and measured > 0 and isinstance(n, int) and n >= 1:
        points.setdefault(n, float(measured))
    return points


def work_seconds(spec: JobSpec, profile: dict[str, Any] | None) -> float | None:
    """Seconds of work a bulk job's run length is on its requested GPUs, before it ever ran:
    what the snapshot's ``remaining_work`` is until a run measures it (issue 26: a deadline
    job is planned from its submission, live as in the simulator).

    ``run.duration_s`` is that many seconds; ``sla.throughput.work_samples``, or ``run.steps``
    x the global batch, at the profile's rate on ``spec.gpus`` GPUs (interpolated between the
    sizes it has, as the scheduler's speedup curve is). ``None``: an interactive job, work in
    tokens, or no rate within the job's sizes.
    """
    if spec.job_class != "bulk":
        return None
    if spec.run.duration_s is not None:
        return float(spec.run.duration_s)
    tp = spec.sla.throughput
    if tp is not None and tp.work_samples is not None:
        samples = float(tp.work_samples)
    elif spec.run.steps is not None:
        samples = float(spec.run.steps * global_batch(spec))
    else:
        return None
    hi = spec.resources.gpus.upper
    points = {n: v for n, v in profile_points(profile).items() if n <= hi}
    if not points:
        return None
    rate = speedup_curve(spec, points)[spec.gpus - 1]
    return samples / rate if rate > 0 else None


def check_deadline(spec: JobSpec, samples_per_s: float | None) -> DeadlineCheck:
    """Can ``spec``'s ``work_samples`` be done within its ``deadline_s``?

    Args:
        spec: the job; only a throughput SLA with ``work_samples`` and ``deadline_s`` is
            judged (anything else is ``ok``).
        samples_per_s: the job's tuned rate on all of its allowed GPUs (``None``: unknown,
            the check is skipped with a note).
    """
    tp = spec.sla.throughput
    if tp is None or tp.deadline_s is None:
        return DeadlineCheck(True, "")
    if tp.work_samples is None:
        return DeadlineCheck(
            None,
            f"job {spec.name!r}: deadline not checked at submit: its work is in tokens "
            "(a tuned rate is in samples/s; give sla.throughput.work_samples to have it "
            "checked)",
        )
    if samples_per_s is None or samples_per_s <= 0:
        return DeadlineCheck(
            None,
            f"job {spec.name!r}: deadline not checked: no tuned rate yet "
            f"(`orch tune` the job file first)",
        )
    need = tp.work_samples / samples_per_s
    gpus = spec.resources.gpus.upper
    if need <= tp.deadline_s:
        return DeadlineCheck(True, "")
    return DeadlineCheck(
        False,
        f"job {spec.name!r}: sla.throughput.deadline_s {tp.deadline_s:g} s cannot be met: "
        f"{tp.work_samples} samples at the tuned {samples_per_s:,.1f} samples/s on up to "
        f"{gpus} GPUs take {need:,.0f} s",
    )


# ---- the plan's verdict at submission (issue 26) --------------------------------------------


def submission_view(spec: JobSpec, now: float, work: float | None) -> QueuedJob:
    """A job being submitted as the scheduler's snapshot will show it in the queue: its
    stored sizes, deadline and work estimate (``JobStore.work_estimates``); never run, so no
    measured speedup (linear, as the scheduler's curve with nothing measured)."""
    lo, hi = gpu_range(spec)
    tp = spec.sla.throughput
    due = tp.deadline_s if tp is not None and spec.job_class == "bulk" else None
    return QueuedJob(
        spec.name,
        spec.job_class,
        spec.team,
        spec.gpus,
        0,
        now,
        min_gpus=lo,
        max_gpus=hi,
        deadline=None if due is None else now + due,
        remaining_work=work,
    )


def plan_verdicts(
    plan: Mapping[str, Any] | None,
    specs: Sequence[JobSpec],
    works: Sequence[float | None],
    now: float,
) -> dict[int, Verdict]:
    """The verdict of each deadline job of ``specs`` (by index) on the plan the scheduler
    published (``plan``: ``{"steps", "restart_cost_s", "margin_frac"}``; ``None``: none
    published, no verdicts), judged together EDF as the scheduler's admission desk judges
    the jobs of one round. A job without a deadline or a work estimate gets none."""
    if not plan or not isinstance(plan.get("steps"), list):
        return {}
    steps = [(float(t), int(f)) for t, f in plan["steps"]]
    timeline = Timeline.from_steps(now, steps)
    # by index: jobs of one batch may share a name
    jobs = [
        replace(submission_view(s, now, w), job_id=str(i))
        for i, (s, w) in enumerate(zip(specs, works, strict=True))
    ]
    verdicts = plan_jobs(
        timeline, jobs, now, float(plan["restart_cost_s"]), float(plan["margin_frac"])
    )
    return {int(v.job_id): v for v in verdicts}


def refusal(spec: JobSpec, verdict: Verdict, now: float) -> str:
    """Why the plan declines a job, in one line: its deadline and the earliest time it could
    be done."""
    tp = spec.sla.throughput
    due = tp.deadline_s if tp is not None else None
    if math.isfinite(verdict.earliest):
        when = (
            f"the earliest it could be done is {verdict.earliest - now:,.0f} s after submission "
            f"(on {verdict.gpus} GPUs)"
        )
    else:
        when = "no size in resources.gpus fits the plan"
    return (
        f"job {spec.name!r}: sla.throughput.deadline_s {due:g} s cannot be met beside the "
        f"deadline jobs already admitted: {when}"
    )
