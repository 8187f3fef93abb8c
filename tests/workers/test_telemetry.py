"""Percentiles and NVML sampling."""

from __future__ import annotations

import math

import pytest

from workers.telemetry import NvmlSampler, percentile, process_peak_rss_mb


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([1.0, 2.0, 3.0, 4.0], 50, 2.5),
        ([1.0, 2.0, 3.0, 4.0], 0, 1.0),
        ([1.0, 2.0, 3.0, 4.0], 100, 4.0),
        ([1.0, 2.0, 3.0, 4.0], 25, 1.75),
        ([4.0, 1.0, 3.0, 2.0], 75, 3.25),  # order of input does not matter
        ([7.0], 95, 7.0),
        (list(map(float, range(1, 101))), 95, 95.05),
        (list(map(float, range(1, 101))), 99, 99.01),
        ([10.0, 20.0], 95, 19.5),
    ],
)
def test_percentile_known_values(values: list[float], q: float, expected: float) -> None:
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_matches_numpy_linear() -> None:
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(0)
    values = rng.exponential(size=37).tolist()
    for q in (0, 1, 33.3, 50, 90, 95, 99, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_percentile_edge_cases() -> None:
    assert math.isnan(percentile([], 50))
    with pytest.raises(ValueError, match="q must be in"):
        percentile([1.0], 101)


def test_nvml_without_a_gpu_is_unavailable_not_an_error() -> None:
    sampler = NvmlSampler(None)
    sampler.start()
    assert sampler.snapshot() == {"nvml": "unavailable"}
    sampler.stop()


def test_nvml_with_an_unknown_device_is_unavailable() -> None:
    sampler = NvmlSampler("GPU-00000000-0000-0000-0000-000000000000")
    sampler.start()
    assert sampler.snapshot() == {"nvml": "unavailable"}
    sampler.stop()


def test_peak_rss_is_positive() -> None:
    assert process_peak_rss_mb() > 1.0


def test_energy_counter_is_absent_without_nvml() -> None:
    sampler = NvmlSampler(None)
    sampler.start()
    assert sampler.energy_mj() is None
    sampler.stop()
