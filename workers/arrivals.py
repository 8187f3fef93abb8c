"""Open-loop arrival times: a seeded Poisson stream at a rate, or the times of a trace.

Open loop: requests arrive whether or not the service keeps up, as users do (a closed loop
would slow its own arrivals and hide the tail). A service's simulated load
(:mod:`workers.serving`, :mod:`workers.serve_run`) and ``orch load``'s requests to a live one
(:mod:`orchestrator.load`) read the same streams from the same settings, so a trace given to
either means the same load. Pure and standard-library only: the light client imports it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from workers.errors import HarnessConfigError

__all__ = ["MAX_ARRIVALS", "parse_trace", "poisson_arrivals", "repeat_trace"]

MAX_ARRIVALS = 10_000_000
"""A stream longer than this is refused (its arrival times are held in memory)."""


def poisson_arrivals(
    rate_rps: float, duration_s: float, seed: int = 0, *, limit: int = MAX_ARRIVALS
) -> list[float]:
    """Arrival times (seconds from 0) of a Poisson stream at ``rate_rps`` over ``duration_s``:
    exponential gaps drawn from ``random.Random(seed)``, so a seed gives the same stream.

    Raises:
        HarnessConfigError: a rate or duration that is not a finite number > 0, or more than
            ``limit`` arrivals expected (``rate_rps x duration_s``).
    """
    for name, value in (("rate_rps", rate_rps), ("duration_s", duration_s)):
        if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
            raise HarnessConfigError(f"{name} must be a finite number > 0, got {value!r}")
    if rate_rps * duration_s > limit:
        raise HarnessConfigError(
            f"rate_rps x duration_s is {rate_rps * duration_s:,.0f} requests; "
            f"at most {limit:,} in one run"
        )
    rng = random.Random(seed)
    out: list[float] = []
    t = rng.expovariate(rate_rps)
    while t < duration_s:
        out.append(t)
        t += rng.expovariate(rate_rps)
    return out


def parse_trace(text: str, *, limit: int = MAX_ARRIVALS) -> list[float]:
    """Arrival times from a trace: times in seconds, one per line or several on a line
    separated by whitespace (blank lines and ``#`` comments skipped), never decreasing,
    shifted so the first is 0.

    Raises:
        HarnessConfigError: a time that is not a finite number >= 0, or earlier than the one
            before it (naming its line), no arrival at all, or more than ``limit``.
    """
    out: list[float] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        for word in raw.split("#", 1)[0].split():
            try:
                t = float(word)
            except ValueError:
                raise HarnessConfigError(
                    f"trace line {number}: expected an arrival time in seconds, got {word[:40]!r}"
                ) from None
            if not math.isfinite(t) or t < 0:
                raise HarnessConfigError(
                    f"trace line {number}: time must be >= 0, got {word[:40]!r}"
                )
            if out and t < out[-1]:
                raise HarnessConfigError(
                    f"trace line {number}: arrival times must not decrease "
                    f"({t:g} after {out[-1]:g})"
                )
            out.append(t)
            if len(out) > limit:
                raise HarnessConfigError(f"the trace has more than {limit:,} arrivals")
    if not out:
        raise HarnessConfigError("the trace has no arrival time")
    return [t - out[0] for t in out]


def repeat_trace(
    times: Sequence[float], duration_s: float, *, limit: int = MAX_ARRIVALS
) -> list[float]:
    """``times`` (a parsed trace, from 0) repeated to cover ``duration_s``: a copy every
    ``times[-1]`` seconds (every millisecond if that is 0), each time kept while under
    ``duration_s`` (a trace longer than it is cut).

    Raises:
        HarnessConfigError: more than ``limit`` arrivals.
    """
    period = max(times[-1], 1e-3)
    out: list[float] = []
    k = 0
    while k * period < duration_s:
        out.extend(t + k * period for t in times if t + k * period < duration_s)
        if len(out) > limit:
            raise HarnessConfigError(
                f"the trace repeated over {duration_s:g} s has more than {limit:,} arrivals"
            )
        k += 1
    return out
