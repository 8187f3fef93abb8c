"""The job's performance profile: measured curves, the fitted model, and its accuracy.

Per job, for each precision: throughput and latency against micro-batch and GPU count as
measured by the tuning trials, plus the fitted step-time model's prediction of throughput at
every GPU count for the chosen settings (what the scheduler needs to decide how many GPUs a
job is worth). After the job runs, :func:`record_outcome` compares what it measured with what
was predicted (:func:`prediction_errors`) and keeps the error; while it runs, a run whose
figures contradict the profile corrects it (:func:`record_live`: the SLA guard's
``profile-drift``), and :func:`expected` then reads the live figures first. Profiles are stored by
``orchestrator.store.ProfileStore`` (``{ns}:profile:{job}``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from orchestrator.tuner.history import History
from orchestrator.tuner.perfmodel import Sample, StepModel, fit_step_model
from orchestrator.tuner.space import Config

if TYPE_CHECKING:
    from orchestrator.store.tuning import ProfileStore

__all__ = ["build_profile", "expected", "prediction_errors", "record_live", "record_outcome"]


def build_profile(history: History, chosen: Config | None) -> dict[str, Any]:
    """The profile of one tuning run, as JSON data."""
    goal = history.goal
    curves: dict[str, list[dict[str, Any]]] = {}
    for r in history.points():
        m, c = r.measurement, r.config
        curves.setdefault(c.precision, []).append(
            {
                **c.to_dict(),
                "status": m.status,
                "samples_per_s": m.samples_per_s,
                "tokens_per_s": m.tokens_per_s,
                "p50_ms": m.p50_ms,
                "p95_ms": m.p95_ms,
                "p99_ms": m.p99_ms,
                "peak_mem_mb": m.peak_mem_mb,
                "data_wait_share": m.data_wait_share,
                "gpu_busy_share": m.gpu_busy_share,
                "energy_per_sample_j": m.energy_per_sample_j,
            }
        )
    for points in curves.values():
        points.sort(key=lambda p: (p["gpus"], p["micro_batch"], p["grad_accum"]))
    profile: dict[str, Any] = {"goal": goal.describe(), "curves": curves, "chosen": None}
    if chosen is None:
        return profile
    same = [
        r
        for r in history.points()
        if r.measurement.ok
        and r.measurement.samples_per_s
        # a command job's script settings may change the model: one family's runs only
        and (r.config.precision, r.config.activation_checkpointing, r.config.compile)
        == (chosen.precision, chosen.activation_checkpointing, chosen.compile)
        and r.config.settings == chosen.settings
        and (r.config.gpus == 1 or r.config.sharding == chosen.sharding)
    ]
    samples = [
        Sample(
            r.config.gpus,
            r.config.micro_batch,
            r.config.grad_accum,
            r.config.gpus
            * r.config.micro_batch
            * r.config.grad_accum
            / float(r.measurement.samples_per_s or 1.0),
            (goal.latency(r.measurement) or 0.0)
            / (
                1000.0
                * r.config.gpus
                * r.config.micro_batch
                * r.config.grad_accum
                / float(r.measurement.samples_per_s or 1.0)
            ),
        )
        for r in same
    ]
    model = fit_step_model(samples, history.space.gpus_per_node)
    predicted: dict[str, Any] = {"config": chosen.to_dict()}
    if model is not None:
        predicted.update(
            samples_per_s=model.samples_per_s(chosen.gpus, chosen.micro_batch, chosen.grad_accum),
            latency_ms=model.latency_ms(chosen.gpus, chosen.micro_batch, chosen.grad_accum),
            percentile=goal.percentile,
            fit_error=model.error,
            by_gpus=[_at_gpus(history, chosen, g, model) for g in history.space.gpus],
        )
    rec = history.measured(chosen)
    if rec is not None and rec.measurement.ok:
        predicted["measured_samples_per_s"] = rec.measurement.samples_per_s
        predicted["measured_latency_ms"] = goal.latency(rec.measurement)
    profile["chosen"] = predicted
    return profile


def _at_gpus(history: History, chosen: Config, gpus: int, model: StepModel) -> dict[str, Any]:
    """The chosen settings on ``gpus`` GPUs: measured when a trial ran exactly that, else the
    model's prediction (``measured`` says which). A job that keeps its global batch runs there
    as an elastic resize runs it: the batch split by ``elastic.split_batch`` (a micro-batch no
    larger than the chosen one, the least accumulation); the same micro-batch otherwise."""
    at = dataclasses.replace(chosen, gpus=gpus)
    if history.space.global_batches is not None:
        from orchestrator.elastic import split_batch

        split = split_batch(chosen.global_batch, gpus, chosen.micro_batch)
        if split is not None:
            at = dataclasses.replace(at, micro_batch=split[0], grad_accum=split[1])
    rec = history.measured(at)
    if rec is not None and rec.measurement.ok and rec.measurement.samples_per_s:
        return {
            "gpus": gpus,
            "samples_per_s": rec.measurement.samples_per_s,
            "latency_ms": history.goal.latency(rec.measurement),
            "measured": True,
        }
    return {
        "gpus": gpus,
        "samples_per_s": model.samples_per_s(gpus, at.micro_batch, at.grad_accum),
        "latency_ms": model.latency_ms(gpus, at.micro_batch, at.grad_accum),
        "measured": False,
    }


def prediction_errors(
    profile: Mapping[str, Any] | None, metrics: Mapping[str, Any]
) -> dict[str, float] | None:
    """Relative error of a profile's predicted throughput and latency against the measured
    ``metrics`` (the harness's report keys): ``(predicted - measured) / measured``.

    Returns:
        The errors of what was both predicted and measured; ``None`` when the profile has no
        prediction.
    """
    chosen = (profile or {}).get("chosen") or {}
    if not chosen or "samples_per_s" not in chosen:
        return None
    errors: dict[str, float] = {}
    measured = metrics.get("samples_per_s")
    if measured:
        errors["samples_per_s"] = (chosen["samples_per_s"] - measured) / measured
    lat = metrics.get(f"p{chosen.get('percentile', 95)}_ms")
    if lat:
        errors["latency_ms"] = (chosen["latency_ms"] - lat) / lat
    return errors


def record_outcome(
    profiles: ProfileStore, job: str, metrics: dict[str, Any]
) -> dict[str, float] | None:
    """After the job ran: its :func:`prediction_errors`, kept in its stored profile (with the
    measured ``metrics``) and returned; ``None`` when the job has no prediction."""
    profile = profiles.load(job)
    errors = prediction_errors(profile, metrics)
    if profile is None or errors is None:
        return None
    profile["outcome"] = {"measured": metrics, "error": errors}
    profiles.save(job, profile)
    return errors


def expected(profile: Mapping[str, Any] | None, gpus: int) -> tuple[float | None, float | None]:
    """What a run of the chosen settings on ``gpus`` GPUs is expected to show: ``(samples/s,
    latency ms)``, from the best evidence the profile holds: what a live run measured on that
    GPU count (:func:`record_live`), else the tuning trial of exactly that config, else the
    fitted model's prediction. ``(None, None)`` when the profile chose nothing for that count.

    The trial comes before the model: a measurement of exactly that config has no fit error.
    """
    chosen = (profile or {}).get("chosen") or {}
    if int((chosen.get("config") or {}).get("gpus", 1)) != gpus:
        return None, None
    live = chosen.get("live") or {}
    if int(live.get("gpus", 0)) != gpus:
        live = {}
    rate = _first_positive(
        live.get("samples_per_s"), chosen.get("measured_samples_per_s"), chosen.get("samples_per_s")
    )
    ms = _first_positive(
        live.get("latency_ms"), chosen.get("measured_latency_ms"), chosen.get("latency_ms")
    )
    return rate, ms


def record_live(
    profiles: ProfileStore,
    job: str,
    gpus: int,
    samples_per_s: float | None,
    latency_ms: float | None,
    at: float,
) -> dict[str, Any] | None:
    """A run contradicted the profile: keep what it measured (on ``gpus`` GPUs, at ``at``) as
    the chosen settings' live figures, which :func:`expected` reads first from then on.
    Returns the figures kept, ``None`` when the job has no chosen settings."""
    profile = profiles.load(job)
    chosen = (profile or {}).get("chosen")
    if profile is None or not chosen:
        return None
    live = {"gpus": gpus, "samples_per_s": samples_per_s, "latency_ms": latency_ms, "at": at}
    chosen["live"] = live
    profiles.save(job, profile)
    return live


def _first_positive(*values: Any) -> float | None:
    for v in values:
        if isinstance(v, int | float) and not isinstance(v, bool) and v > 0:
            return float(v)
    return None
