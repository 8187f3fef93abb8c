"""Synthetic interactive sessions, from a documented, seeded generator.

No public trace records interactive GPU sessions with their start-latency targets, so the mixed
benchmark generates them. The process (all from one ``random.Random(seed)``):

* **Arrivals**: a non-homogeneous Poisson process with a daily cycle, rate
  ``lambda(t) = lambda0 * (1 + 0.5 * sin(2 pi t / 86400))`` (busiest 6 hours after the trace
  starts, quietest 18 hours after), drawn by thinning.
* **Sizes**: 1, 2, 4 or 8 GPUs with probabilities 0.5, 0.25, 0.15, 0.10 (mean 2.4).
* **Durations**: log-normal, median 30 minutes, ``sigma = 1``, clipped to 5 minutes .. 8 hours
  (mean about 47 minutes).
* **Teams**: drawn in proportion to ``team_weights``.
* **SLA**: start within ``wait_target`` seconds (default 60) of submission.

``lambda0`` follows from ``gpu_load``, the mean number of GPUs the sessions should hold:
``lambda0 = gpu_load / (mean size * mean duration)``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping

from orchestrator.sim.trace import TraceJob

SIZES = (1, 2, 4, 8)
SIZE_P = (0.5, 0.25, 0.15, 0.10)
MEDIAN_S = 1800.0
SIGMA = 1.0
MIN_S, MAX_S = 300.0, 8 * 3600.0


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def mean_duration() -> float:
    """Mean session length: the log-normal's mean, clipped to ``MIN_S .. MAX_S`` (closed form)."""
    mu, lo, hi = math.log(MEDIAN_S), math.log(MIN_S), math.log(MAX_S)
    inside = math.exp(mu + SIGMA**2 / 2) * (
        _phi((hi - mu - SIGMA**2) / SIGMA) - _phi((lo - mu - SIGMA**2) / SIGMA)
    )
    return MIN_S * _phi((lo - mu) / SIGMA) + MAX_S * (1 - _phi((hi - mu) / SIGMA)) + inside


def interactive_sessions(
    span_s: float,
    gpu_load: float,
    team_weights: Mapping[str, float],
    seed: int = 0,
    wait_target: float = 60.0,
) -> list[TraceJob]:
    """Interactive sessions submitted during ``span_s`` seconds (see the module docstring).

    Args:
        span_s: seconds over which sessions arrive.
        gpu_load: mean GPUs held by sessions (sets the arrival rate).
        team_weights: relative share of the sessions per team.
        seed: the random seed; same arguments, same sessions.
        wait_target: the start-wait target of every session (seconds).
    """
    rng = random.Random(seed)
    mean_size = sum(s * p for s, p in zip(SIZES, SIZE_P, strict=True))
    rate = gpu_load / (mean_size * mean_duration())
    peak = 1.5 * rate
    teams = sorted(team_weights)
    weights = [team_weights[t] for t in teams]
    jobs: list[TraceJob] = []
    t = 0.0
    while True:
        t += rng.expovariate(peak)
        if t >= span_s:
            break
        if rng.random() * peak > rate * (1 + 0.5 * math.sin(2 * math.pi * t / 86400.0)):
            continue
        gpus = rng.choices(SIZES, SIZE_P)[0]
        duration = min(MAX_S, max(MIN_S, rng.lognormvariate(math.log(MEDIAN_S), SIGMA)))
        jobs.append(
            TraceJob(
                name=f"session-{len(jobs)}",
                submit_time=round(t, 3),
                team=rng.choices(teams, weights)[0],
                job_class="interactive",
                gpus=gpus,
                duration=round(duration, 3),
                wait_target=wait_target,
            )
        )
    return jobs


def concurrent_gpus(jobs: list[TraceJob], q: float) -> int:
    """The ``q``-th percentile (0..100) over time of the GPUs ``jobs`` hold if each starts on
    submission and runs its ``duration`` (the demand a reserved partition must cover)."""
    events = sorted(
        [(j.submit_time, j.gpus) for j in jobs]
        + [(j.submit_time + j.duration, -j.gpus) for j in jobs]
    )
    if not events:
        return 0
    level, prev = 0, events[0][0]
    time_at: dict[int, float] = {}
    for t, delta in events:
        time_at[level] = time_at.get(level, 0.0) + t - prev
        level += delta
        prev = t
    total = sum(time_at.values())
    acc = 0.0
    for lvl in sorted(time_at):
        acc += time_at[lvl]
        if acc >= q / 100 * total:
            return lvl
    return max(time_at)
