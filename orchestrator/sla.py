"""Is a job meeting its SLA? One function, used by `orch show`, the demo table and the scheduler."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.spec import JobSpec


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
        verdicts.append(None if value is None else value <= lat.max_ms)
        measured.append("-" if value is None else f"p{lat.percentile} {value:.1f} ms")
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
