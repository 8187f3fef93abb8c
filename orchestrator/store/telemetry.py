"""Counters and histograms the control loop observes, kept in Redis for ``/metrics``.

The API server may run in another process than the loop (``orch serve``), so what only the loop
sees (how long a round took, preemptions, SLA verdicts of finished jobs...) is kept in one hash,
``{ns}:telemetry``, which the loop increments and the API's Prometheus collector reads at scrape
time. The values only grow (Prometheus counters), until the namespace is deleted.

Fields of the hash (``label`` is one label value, such as a job class, or empty)::

    c|{name}|{label}           a counter
    h|{name}|{label}|{i}       observations in bucket ``i`` of a histogram (not cumulative:
                               one increment per observation; ``i == len(bounds)`` is +Inf)
    h|{name}|{label}|sum       the sum of the observations
    h|{name}|{label}|count     how many observations

The loop does not write per event: it gathers increments in a :class:`TelemetryBuffer` and adds
them in one pipelined round trip now and then (:meth:`TelemetryStore.add`).
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import cast

from orchestrator.store.keys import KeyFamily

__all__ = [
    "ROUND_SECONDS",
    "WAIT_SECONDS",
    "Histogram",
    "HistogramSpec",
    "Telemetry",
    "TelemetryBuffer",
    "TelemetryStore",
]


@dataclass(frozen=True)
class HistogramSpec:
    """A histogram's name and fixed bucket bounds (upper bounds, ascending, +Inf implied)."""

    name: str
    bounds: tuple[float, ...]

    def bucket(self, value: float) -> int:
        """The index of the bucket ``value`` falls in (``le`` semantics: bound >= value)."""
        return bisect.bisect_left(self.bounds, value)


ROUND_SECONDS = HistogramSpec(
    "round_seconds",
    (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)
"""How long one scheduling round took (reap to publish)."""

WAIT_SECONDS = HistogramSpec(
    "wait_to_start_seconds",
    (1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400),
)
"""From a job's submission to its first placement, per job class."""


def _counter_field(name: str, label: str) -> str:
    return f"c|{name}|{label}"


def _hist_field(spec: HistogramSpec, label: str, part: str) -> str:
    return f"h|{spec.name}|{label}|{part}"


@dataclass
class TelemetryBuffer:
    """Increments gathered in memory since the last :meth:`TelemetryStore.add` (field ->
    amount): integer counts and float sums apart, as Redis increments them differently."""

    counts: Counter[str] = field(default_factory=Counter)
    sums: dict[str, float] = field(default_factory=dict)

    def count(self, name: str, label: str = "", by: int = 1) -> None:
        """Add ``by`` to counter ``name`` (of ``label``)."""
        if by:
            self.counts[_counter_field(name, label)] += by

    def add(self, name: str, amount: float, label: str = "") -> None:
        """Add ``amount`` (a float: GPU-seconds) to counter ``name`` (of ``label``)."""
        if amount and math.isfinite(amount):
            key = _counter_field(name, label)
            self.sums[key] = self.sums.get(key, 0.0) + amount

    def observe(self, spec: HistogramSpec, value: float, label: str = "") -> None:
        """Record one observation of histogram ``spec`` (of ``label``)."""
        if not math.isfinite(value):
            return
        self.counts[_hist_field(spec, label, str(spec.bucket(value)))] += 1
        self.counts[_hist_field(spec, label, "count")] += 1
        key = _hist_field(spec, label, "sum")
        self.sums[key] = self.sums.get(key, 0.0) + value

    def __bool__(self) -> bool:
        return bool(self.counts or self.sums)

    def clear(self) -> None:
        """Forget what was gathered (once it is added to the store)."""
        self.counts.clear()
        self.sums.clear()


@dataclass(frozen=True)
class Histogram:
    """One histogram as read: cumulative counts per upper bound (``+Inf`` last), and the sum."""

    buckets: tuple[tuple[float, int], ...]
    total: float

    @property
    def count(self) -> int:
        """How many observations (the +Inf bucket)."""
        return self.buckets[-1][1] if self.buckets else 0


@dataclass(frozen=True)
class Telemetry:
    """What the hash held when read: counters and raw histogram fields, by name and label."""

    fields: Mapping[str, str]

    def counter(self, name: str) -> dict[str, float]:
        """Counter ``name``: label -> value (labels never counted are absent)."""
        prefix = f"c|{name}|"
        return {k[len(prefix) :]: float(v) for k, v in self.fields.items() if k.startswith(prefix)}

    def histogram(self, spec: HistogramSpec) -> dict[str, Histogram]:
        """Histogram ``spec``: label -> its cumulative buckets and sum."""
        prefix = f"h|{spec.name}|"
        raw: dict[str, dict[str, str]] = {}
        for key, value in self.fields.items():
            if key.startswith(prefix):
                label, _, part = key[len(prefix) :].rpartition("|")
                raw.setdefault(label, {})[part] = value
        out = {}
        for label, parts in raw.items():
            running, buckets = 0, []
            for i, bound in enumerate((*spec.bounds, math.inf)):
                running += int(parts.get(str(i), 0))
                buckets.append((bound, running))
            out[label] = Histogram(tuple(buckets), float(parts.get("sum", 0.0)))
        return out


class TelemetryStore(KeyFamily):
    """The loop's counters and histograms of one namespace."""

    def add(self, buffer: TelemetryBuffer) -> None:
        """Add what ``buffer`` gathered, in one round trip (a no-op when it is empty); the
        buffer is cleared once the store has it."""
        if not buffer:
            return
        key = self._keys.telemetry
        pipe = self._client.pipeline(transaction=False)
        for name, n in buffer.counts.items():
            pipe.hincrby(key, name, n)
        for name, x in buffer.sums.items():
            pipe.hincrbyfloat(key, name, x)
        pipe.execute()
        buffer.clear()

    def read(self) -> Telemetry:
        """Every counter and histogram as it stands."""
        return Telemetry(cast(dict[str, str], self._client.hgetall(self._keys.telemetry)))
