"""Per-run figures: their arithmetic on numbers, and the peak memory restarted per run."""

from __future__ import annotations

import sys

import pytest
import torch

from workers.ratios import busy_share, data_wait_share, energy_per_sample_j, mean_ms
from workers.runstats import PeakMemory, RunMeter
from workers.telemetry import NvmlSampler


def test_energy_per_sample_is_the_counter_difference_in_joules_over_samples() -> None:
    # 12.5 kJ of counter (millijoules) over 2500 samples: 5 J each
    assert energy_per_sample_j(1_000_000, 13_500_000, 2500) == pytest.approx(5.0)
    assert energy_per_sample_j(7, 7, 10) == 0.0


@pytest.mark.parametrize(
    ("start", "end", "samples"),
    [(None, 100, 10), (100, None, 10), (100, 200, 0), (500, 100, 10)],  # last: counter reset
)
def test_energy_per_sample_is_none_without_a_valid_reading(
    start: int | None, end: int | None, samples: int
) -> None:
    assert energy_per_sample_j(start, end, samples) is None


def test_busy_share_is_compute_over_wall_time() -> None:
    assert busy_share(3.0, 4.0) == pytest.approx(0.75)
    assert busy_share(4.000001, 4.0) == 1.0  # two clocks around one interval
    assert busy_share(1.0, 0.0) is None


def test_data_wait_share_is_wait_over_the_whole_step() -> None:
    # the mlp figure: 2.8 ms of making data in a 3.6 ms step
    assert data_wait_share(2.8, 0.8) == pytest.approx(2.8 / 3.6)
    assert data_wait_share(0.0, 5.0) == 0.0
    assert data_wait_share(0.0, 0.0) is None


def test_mean_ms() -> None:
    assert mean_ms(0.5, 4) == pytest.approx(125.0)
    assert mean_ms(0.0, 0) is None


def test_meter_sums_measured_steps_and_leaves_gpu_figures_absent_on_the_cpu() -> None:
    nvml = NvmlSampler(None)
    meter = RunMeter(torch.device("cpu"), nvml)
    assert not meter.measuring
    meter.begin(100.0)
    meter.add(0.003, 0.001, 8)
    meter.add(0.001, 0.003, 8)
    s = meter.summary(100.01)
    assert s["data_wait_ms"] == pytest.approx(2.0)
    assert s["compute_ms"] == pytest.approx(2.0)
    assert s["data_wait_share"] == pytest.approx(0.5)
    assert s["gpu_busy_share"] is None and s["energy_per_sample_j"] is None
    assert meter.samples == 16


def test_the_wait_percentile_tells_a_rare_stall_from_frequent_ones() -> None:
    meter = RunMeter(torch.device("cpu"), NvmlSampler(None))
    meter.begin(0.0)
    for _ in range(40):
        meter.add(0.0, 0.010, 8)  # the loader kept up
    meter.add(0.205, 0.010, 8)  # one stall: workers started for a new epoch
    s = meter.summary(1.0)
    assert s["data_wait_ms"] == pytest.approx(5.0)
    assert s["data_wait_p95_ms"] == pytest.approx(0.0, abs=1e-9)  # typical steps wait none
    for _ in range(4):  # now one step in nine stalls
        meter.add(0.205, 0.010, 8)
    assert meter.summary(1.0)["data_wait_p95_ms"] == pytest.approx(205.0, rel=0.02)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/clear_refs")
def test_cpu_peak_restarts_from_the_current_rss() -> None:
    peak = PeakMemory(torch.device("cpu"))
    big = torch.ones(64 * 2**20 // 4)  # 64 MiB, touched
    peak.reset()
    with_big = peak.peak_mb()
    del big
    peak.reset()
    assert peak.scope == "run"
    assert peak.peak_mb() < with_big - 48  # the freed 64 MiB is not this run's peak
