"""The last few seconds of a run's steps: what the SLA guard compares with the SLA.

A run's cumulative figures (:class:`workers.latency.LatencySketch`, samples over all measured
steps) answer "how did the run do"; after an hour of steps they barely move when the job slows
down now. The guard needs "how is it doing": the latency percentiles and throughput of the steps
that ended in the last ``window_s`` seconds. At most ``max_steps`` are kept (a bounded deque),
and the percentiles of so few are exact (:func:`workers.telemetry.percentile` on a sorted copy,
once per report: about a second apart).
"""

from __future__ import annotations

from collections import deque

from workers.telemetry import percentile

__all__ = ["RecentSteps"]


class RecentSteps:
    """Steps that ended in the last ``window_s`` seconds (at most ``max_steps`` of them).

    Args:
        window_s: how far back the window reaches.
        max_steps: the most steps kept (the oldest go first).
    """

    def __init__(self, window_s: float = 30.0, max_steps: int = 512) -> None:
        self.window_s = window_s
        self._steps: deque[tuple[float, float, int]] = deque(maxlen=max_steps)

    def add(self, ended_at: float, step_s: float, samples: int) -> None:
        """One measured step: when it ended (monotonic seconds), how long it took, its
        samples (the global batch)."""
        self._steps.append((ended_at, step_s, samples))

    def summary(self, now: float) -> dict[str, float | int | None]:
        """``window_p50_ms``, ``window_p95_ms``, ``window_p99_ms``, ``window_samples_per_s``
        (samples over step time, as the run's own figure) and ``window_steps``, over the steps
        that ended at or after ``now - window_s`` (``None`` figures when there are none)."""
        steps = self._steps
        while steps and steps[0][0] < now - self.window_s:
            steps.popleft()
        if not steps:
            return {
                "window_p50_ms": None,
                "window_p95_ms": None,
                "window_p99_ms": None,
                "window_samples_per_s": None,
                "window_steps": 0,
            }
        ms = sorted(s * 1000.0 for _, s, _ in steps)
        busy = sum(s for _, s, _ in steps)
        return {
            "window_p50_ms": percentile(ms, 50),
            "window_p95_ms": percentile(ms, 95),
            "window_p99_ms": percentile(ms, 99),
            "window_samples_per_s": sum(n for _, _, n in steps) / busy if busy > 0 else None,
            "window_steps": len(steps),
        }
