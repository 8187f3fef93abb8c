"""Measurement: latency percentiles, peak memory and NVML sampling.

Nothing here decides anything; the harness records, this module summarises. NVML is optional:
when the library or a CUDA device is missing, or ``nvmlInit`` fails, the sampler reports
``nvml: unavailable`` and the run goes on (rule 6: no GPU is not an error).
"""

from __future__ import annotations

import contextlib
import math
import resource
import sys
import threading
from collections.abc import Sequence
from typing import Any

__all__ = ["NvmlSampler", "percentile", "process_peak_rss_mb"]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values`` with linear interpolation.

    Matches ``numpy.percentile``'s default ("linear", type 7 of Hyndman and Fan 1996): the rank
    is ``q/100 * (n-1)`` and values between ranks are interpolated. Returns NaN when empty.

    Raises:
        ValueError: ``q`` outside [0, 100].
    """
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be in [0, 100], got {q}")
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = q / 100 * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def process_peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MiB (``getrusage``)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


class NvmlSampler:
    """Samples one GPU's utilisation, memory and power from NVML in a background thread.

    Args:
        device_uuid: the CUDA device's UUID (``GPU-...``), or ``None`` on a CPU run. NVML
            numbers devices physically while CUDA renumbers them under
            ``CUDA_VISIBLE_DEVICES`` (as Ray sets it), so the UUID is the reliable key.
        interval_s: seconds between samples.
    """

    def __init__(self, device_uuid: str | None, interval_s: float = 0.5) -> None:
        self._uuid = device_uuid
        self._interval_s = interval_s
        self._handle: Any = None
        self._nvml: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        # Running sums, not sample lists: a week-long job must not grow memory.
        self._samples = 0
        self._util_sum = 0.0
        self._power_sum_w = 0.0
        self._mem_used_mb = 0.0
        self._mem_peak_mb = 0.0

    @property
    def available(self) -> bool:
        """Whether NVML started and found the device."""
        return self._handle is not None

    def start(self) -> None:
        """Initialise NVML and start sampling; stays silently unavailable on any failure."""
        if self._uuid is None:
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByUUID(self._uuid)
            self._nvml = pynvml
        except Exception:  # no driver, no library, no such device: telemetry is optional
            self._handle = None
            return
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="nvml-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the sampling thread and shut NVML down."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._nvml is not None:
            # Shutting down a half-broken NVML must not fail the run.
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()

    def energy_mj(self) -> int | None:
        """NVML's total-energy counter of the device (millijoules since the driver loaded), or
        ``None`` without NVML or on a GPU without the counter (before Volta). The counter is
        the device's: other processes on the same GPU add to it."""
        if not self.available:
            return None
        try:
            return int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))
        except Exception:  # NVMLError_NotSupported, or a transient error: no figure
            return None

    def snapshot(self) -> dict[str, Any]:
        """Report fields: ``nvml`` ("ok" or "unavailable") and, when ok, mean utilisation and
        power and current and peak memory used over the samples so far."""
        if not self.available:
            return {"nvml": "unavailable"}
        with self._lock:
            n = self._samples
            return {
                "nvml": "ok",
                "gpu_util_pct": self._util_sum / n if n else None,
                "gpu_mem_used_mb": self._mem_used_mb,
                "gpu_mem_peak_mb": self._mem_peak_mb,
                "gpu_power_w": self._power_sum_w / n if n else None,
            }

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._sample()

    def _sample(self) -> None:
        nvml, handle = self._nvml, self._handle
        try:
            util = float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            used = nvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20
            power = nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
        except Exception:  # a transient NVML error loses one sample, not the run
            return
        with self._lock:
            self._samples += 1
            self._util_sum += util
            self._power_sum_w += power
            self._mem_used_mb = used
            self._mem_peak_mb = max(self._mem_peak_mb, used)
