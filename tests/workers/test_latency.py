"""The latency sketch: within its stated relative error of exact percentiles, bounded, mergeable."""

from __future__ import annotations

import csv
import math
import pickle
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workers.latency import EXACT_MAX, RELATIVE_ACCURACY, LatencySketch
from workers.telemetry import percentile

# Step times measured on a 64-GPU cluster (Pollux OSDI'21 artifact, bundled in bench/data):
# six applications, thousands of configurations, from milliseconds to seconds per step.
APPS = Path(__file__).resolve().parents[2] / "bench" / "data" / "pollux" / "apps"
QUANTILES = (0.5, 0.95, 0.99)


def recorded_step_times_ms(app: str | None = None) -> list[float]:
    """Every ``step_time`` of ``placements.csv`` and ``scalability.csv`` (one app, or all)."""
    folders = [APPS / app] if app else sorted(p for p in APPS.iterdir() if p.is_dir())
    times = []
    for folder in folders:
        for name in ("placements.csv", "scalability.csv"):
            with (folder / name).open() as fh:
                times += [float(row["step_time"]) * 1000.0 for row in csv.DictReader(fh)]
    return times


def order_statistic(values: list[float], q: float) -> float:
    """The exact value at rank ``floor(q * (n - 1))``: the one the sketch estimates."""
    ordered = sorted(values)
    return ordered[math.floor(q * (len(ordered) - 1))]


def sketch_of(values: list[float]) -> LatencySketch:
    sketch = LatencySketch()
    for v in values:
        sketch.add(v)
    return sketch


def assert_within_stated_error(sketch: LatencySketch, values: list[float]) -> None:
    """Exact (interpolated, as before the sketch) up to ``EXACT_MAX`` values; past that,
    within the sketch's relative error of the order statistic at the rank."""
    for q in QUANTILES:
        if len(values) <= EXACT_MAX:
            assert sketch.quantile(q) == pytest.approx(percentile(values, q * 100), rel=1e-12)
            continue
        exact = order_statistic(values, q)
        estimate = sketch.quantile(q)
        assert estimate is not None
        # a hair of slack for the float arithmetic of the bucket bounds
        assert abs(estimate - exact) <= RELATIVE_ACCURACY * exact * (1 + 1e-9), (q, exact)


@pytest.mark.parametrize(
    "app", [None, "bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"]
)
def test_within_the_stated_relative_error_on_recorded_step_times(app: str | None) -> None:
    times = recorded_step_times_ms(app)
    assert len(times) > 100
    assert_within_stated_error(sketch_of(times), times)


def test_a_checkpointed_and_merged_sketch_answers_as_one_over_all_steps() -> None:
    # a run stopped part-way and resumed: the checkpointed sketch merged with the rest
    times = recorded_step_times_ms()
    half = len(times) // 2
    before = LatencySketch.from_state(pickle.loads(pickle.dumps(sketch_of(times[:half]).state())))
    before.merge(sketch_of(times[half:]))
    assert before.count == len(times)
    whole = sketch_of(times)
    for q in QUANTILES:
        assert before.quantile(q) == whole.quantile(q)
    assert_within_stated_error(before, times)


def test_size_grows_with_the_range_of_latencies_not_their_number() -> None:
    times = recorded_step_times_ms()
    small, large = sketch_of(times), sketch_of(times * 20)
    assert large.count == 20 * small.count
    assert large.state()["counts"] == [20 * n for n in small.state()["counts"]]
    # ~115 buckets per factor of ten at 1%: the recorded times span about three
    buckets = len(small.state()["counts"])
    decades = math.log10(max(times) / min(times))
    assert buckets <= 120 * decades


def test_empty_and_zero() -> None:
    sketch = LatencySketch()
    assert sketch.quantile(0.5) is None and sketch.count == 0
    assert LatencySketch.from_state(sketch.state()).count == 0
    sketch.add(0.0)
    sketch.add(-1.0)  # a clock cannot run backwards: counted as 0
    restored = LatencySketch.from_state(sketch.state())
    assert restored.count == 2 and restored.quantile(0.99) == 0
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        sketch.quantile(95)


def test_merging_sketches_of_other_accuracies_is_refused() -> None:
    with pytest.raises(ValueError, match="relative accuracy"):
        LatencySketch(0.01).merge(LatencySketch(0.02))


@given(st.lists(st.floats(min_value=1e-3, max_value=1e5), min_size=1, max_size=300))
def test_any_latencies_within_the_stated_error(values: list[float]) -> None:
    sketch = LatencySketch.from_state(sketch_of(values).state())
    assert sketch.count == len(values)
    assert_within_stated_error(sketch, values)


def test_a_short_run_reads_its_tail_exactly_and_a_long_one_from_the_sketch() -> None:
    ten = [10.0] * 9 + [100.0]  # a tuning trial: nine quick steps and a slow one
    sketch = sketch_of(ten)
    assert sketch.quantile(0.95) == pytest.approx(percentile(ten, 95))  # 59.5, not ~10
    assert LatencySketch.from_state(sketch.state()).quantile(0.99) == pytest.approx(
        percentile(ten, 99)
    )
    long = [float(i % 97 + 1) for i in range(EXACT_MAX + 1)]
    big = sketch_of(long)
    assert big.state()["exact"] is None  # bounded: only the buckets are kept
    assert_within_stated_error(big, long)
