"""Step latency percentiles from a bounded sketch (DDSketch), at any step count.

A run used to keep every step latency and sort them all on each report: at a million steps that
is most of a second per report and megabytes per checkpoint. A DDSketch (Masson, Rim and Lee,
"DDSketch: a fast and fully-mergeable quantile sketch with relative-error guarantees", VLDB 2019;
the ``ddsketch`` package by Datadog) keeps one counter per logarithmic bucket instead: every
quantile it returns is within :data:`RELATIVE_ACCURACY` of the true order statistic at that rank,
and its size grows with the *range* of the latencies (about 115 buckets per factor of ten at 1%),
not with their number. Sketches merge exactly, so a resumed run continues the one it checkpointed.

Its rank is ``q * (n - 1)`` like :func:`workers.telemetry.percentile`, but it returns the value of
an order statistic at that rank (within the relative accuracy) and does not interpolate between
two neighbours; on a handful of steps the two can differ by the gap between neighbours (on 10
steps the sketch's p95 is the 9th-smallest, the interpolated one near the slowest). So the first
:data:`EXACT_MAX` latencies are also kept as they are, and while a run has no more, percentiles
are the exact interpolated ones: a tuning trial of a few dozen steps reads its tail as before.
Past that the list is dropped and the sketch answers; both stay bounded.
"""

from __future__ import annotations

from typing import Any

from ddsketch.ddsketch import BaseDDSketch
from ddsketch.mapping import LogarithmicMapping
from ddsketch.store import DenseStore

from workers.telemetry import percentile

__all__ = ["RELATIVE_ACCURACY", "LatencySketch"]

RELATIVE_ACCURACY = 0.01
"""Every quantile is within 1% (relative) of the exact order statistic at its rank."""
EXACT_MAX = 1024
"""Up to this many latencies, percentiles are exact (the values are kept, ~10 KB at most)."""


class LatencySketch:
    """Latencies in milliseconds, summarised in bounded space; quantiles with relative error.

    Args:
        relative_accuracy: the guarantee ``|estimate - exact| <= relative_accuracy * exact``.
    """

    def __init__(self, relative_accuracy: float = RELATIVE_ACCURACY) -> None:
        self.relative_accuracy = relative_accuracy
        # The sketch is built from parts kept here so that the state can be read and restored
        # through the stores' public attributes (the package's own serialisation is protobuf).
        self._store = DenseStore()
        self._sketch = BaseDDSketch(
            mapping=LogarithmicMapping(relative_accuracy),
            store=self._store,
            negative_store=DenseStore(),
            zero_count=0.0,
        )
        self._exact: list[float] | None = []  # every latency, while there are few (else None)

    def add(self, latency_ms: float) -> None:
        """Record one latency (0 and below count as 0: a clock cannot run backwards)."""
        value = max(0.0, latency_ms)
        self._sketch.add(value)
        if self._exact is not None:
            self._exact.append(value)
            if len(self._exact) > EXACT_MAX:
                self._exact = None

    @property
    def count(self) -> int:
        """How many latencies were recorded."""
        return int(self._sketch.count)

    def quantile(self, q: float) -> float | None:
        """The ``q``-quantile (0-1) within the relative accuracy, or ``None`` when empty."""
        if not 0 <= q <= 1:
            raise ValueError(f"quantile q must be in [0, 1], got {q}")
        if self._exact:
            return percentile(self._exact, q * 100)
        value = self._sketch.get_quantile_value(q)
        return None if value is None else float(value)

    def merge(self, other: LatencySketch) -> None:
        """Add ``other``'s latencies to this sketch (exact: buckets add up).

        Raises:
            ValueError: the two sketches have different relative accuracies.
        """
        if other.relative_accuracy != self.relative_accuracy:
            raise ValueError(
                f"cannot merge a sketch of relative accuracy {other.relative_accuracy} into one "
                f"of {self.relative_accuracy}"
            )
        self._sketch.merge(other._sketch)
        if self._exact is None or other._exact is None:
            self._exact = None
        else:
            self._exact += other._exact
            if len(self._exact) > EXACT_MAX:
                self._exact = None

    def state(self) -> dict[str, Any]:
        """A compact plain-data form (ints and floats) for checkpoints: see :meth:`from_state`."""
        store = self._store
        counts: list[int] = []
        first = 0
        if store.count:
            first = store.min_key
            lo, hi = store.min_key - store.offset, store.max_key - store.offset
            counts = [round(c) for c in store.bins[lo : hi + 1]]
        return {
            "relative_accuracy": self.relative_accuracy,
            "first_bucket": first,
            "counts": counts,
            "zeros": round(self._sketch.count - store.count),
            "exact": self._exact,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> LatencySketch:
        """The sketch saved by :meth:`state`."""
        sketch = cls(float(state["relative_accuracy"]))
        for i, n in enumerate(state["counts"]):
            if n:
                sketch._store.add(int(state["first_bucket"]) + i, float(n))
        zeros = int(state["zeros"])
        # the parts are filled in before the sketch reads its count from them
        sketch._sketch = BaseDDSketch(
            mapping=LogarithmicMapping(sketch.relative_accuracy),
            store=sketch._store,
            negative_store=DenseStore(),
            zero_count=float(zeros),
        )
        exact = state.get("exact")
        sketch._exact = [float(v) for v in exact] if isinstance(exact, list) else None
        return sketch
