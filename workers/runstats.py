"""Per-run measurements: peak memory since the run began, and the ratios a run reports.

A worker process runs many runs (a tuner's trials, a job's runs on a warm worker), so a figure
kept by the process (CUDA's peak allocated memory, the kernel's peak RSS) must be restarted at
the start of each run, or a small run reads an earlier large one's peak. :class:`PeakMemory`
does that; :class:`RunMeter` keeps the other per-run figures, whose arithmetic is
:mod:`workers.ratios`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import logging
import re
from collections.abc import Callable
from pathlib import Path

import torch

from workers.latency import LatencySketch
from workers.ratios import busy_share, data_wait_share, energy_per_sample_j, mean_ms
from workers.step_parts import StepParts
from workers.telemetry import NvmlSampler, process_peak_rss_mb

__all__ = ["PeakMemory", "RunMeter"]

log = logging.getLogger(__name__)

_CLEAR_REFS = Path("/proc/self/clear_refs")
_STATUS = Path("/proc/self/status")
_HWM = re.compile(r"^VmHWM:\s+(\d+)\s+kB", re.MULTILINE)


class PeakMemory:
    """The peak memory of one run on ``device``, restarted by :meth:`reset`.

    On CUDA: ``torch.cuda.reset_peak_memory_stats`` then ``max_memory_allocated`` (the
    caching allocator's peak of memory handed to tensors). On the CPU: Linux restarts a
    process's resident-set high-water mark (``VmHWM``) from its current RSS when ``5`` is
    written to ``/proc/self/clear_refs`` (proc(5)); where that cannot be done (another OS, a
    kernel without it) the figure is the process's lifetime peak (``getrusage``) and
    :attr:`scope` says ``process``, so a reader knows it may include earlier runs.

    The process's RSS is shared by everything in it: two runs at once in one process (threads)
    each see the other's memory in their CPU figure.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.scope = "run" if device.type == "cuda" else "process"

    def reset(self) -> None:
        """Restart the peak from what the process holds now."""
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            return
        # Freed tensors of an earlier run can still be resident: garbage not yet collected,
        # and pages the C allocator keeps for reuse. Both would be counted as this run's.
        gc.collect()
        _trim_heap()
        try:
            _CLEAR_REFS.write_text("5")
            _read_hwm_kib()
        except (OSError, ValueError):
            log.debug("cannot reset the peak RSS here: reporting the process's peak")
            self.scope = "process"
        else:
            self.scope = "run"

    def peak_mb(self) -> float:
        """The peak in MiB since :meth:`reset` (the process's peak on a CPU where it cannot
        be reset)."""
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device) / 2**20
        if self.scope == "run":
            try:
                return _read_hwm_kib() / 1024
            except (OSError, ValueError):
                pass
        return process_peak_rss_mb()


def _read_hwm_kib() -> int:
    match = _HWM.search(_STATUS.read_text())
    if match is None:
        raise ValueError("no VmHWM in /proc/self/status")
    return int(match.group(1))


def _trim_heap() -> None:
    """Return the C heap's free pages to the kernel (glibc's ``malloc_trim``; no-op elsewhere).

    Hand-written through ctypes: no maintained package wraps this one call.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or ``None`` (not glibc: musl, macOS). Looked up once: finding
    the C library runs ``ldconfig -p`` in a child process, at every run otherwise."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


class RunMeter:
    """One run's data wait, compute, device busy share, energy and peak memory.

    The figures cover this run's measured steps (warm-up excluded), whatever earlier runs of
    the job did: a run resumed from a checkpoint starts them afresh.

    Args:
        device: the run's device; busy share and energy are reported on CUDA only (``None``
            on the CPU: there is no accelerator to be busy or to draw power).
        nvml: the run's NVML sampler (its energy counter; ``None`` readings without NVML).
    """

    def __init__(self, device: torch.device, nvml: NvmlSampler) -> None:
        self.device = device
        self.nvml = nvml
        self.peak = PeakMemory(device)
        self.started: float | None = None  # perf_counter when the first measured step began
        self.energy_start_mj: int | None = None
        self.wait_s = 0.0
        self.compute_s = 0.0
        self.steps = 0
        self.samples = 0  # this rank's samples in measured steps
        # per-step waits: a loader that keeps up on average can still stall now and then
        # (an epoch's first micro-batches, workers started again), which a mean hides
        self.waits = LatencySketch()
        # the timed steps' parts (workers.step_parts): summed, and the steps that had them
        self.parts_steps = 0
        self.fwd_bwd_s = self.comm_s = self.optimizer_s = self.other_s = 0.0
        self.comm_unknown = False  # a step whose sync could not be told from its compute

    @property
    def measuring(self) -> bool:
        """Whether the measured steps have begun."""
        return self.started is not None

    def begin(self, now: float) -> None:
        """The first measured step begins at ``now`` (a ``perf_counter`` value)."""
        self.started = now
        self.energy_start_mj = self.nvml.energy_mj()

    def add(
        self, wait_s: float, compute_s: float, samples: int, parts: StepParts | None = None
    ) -> None:
        """One measured step: its data wait, its timed step, this rank's samples in it, and
        the timed step's parts (:mod:`workers.step_parts`), when marked."""
        self.wait_s += wait_s
        self.waits.add(wait_s * 1000.0)
        self.compute_s += compute_s
        self.steps += 1
        self.samples += samples
        if parts is not None:
            self.parts_steps += 1
            self.fwd_bwd_s += parts.compute
            self.optimizer_s += parts.optimizer
            self.other_s += parts.other
            if parts.comm is None:
                self.comm_unknown = True
            else:
                self.comm_s += parts.comm

    def summary(self, now: float) -> dict[str, float | str | None]:
        """The report fields: ``peak_mem_mb`` and ``peak_mem_scope`` (``run``, or ``process``
        where the CPU's peak cannot be reset), ``data_wait_ms`` and ``compute_ms`` (mean per
        measured step), ``data_wait_p95_ms`` (the 95th percentile of the steps' waits: stalls
        a mean hides), ``fwd_bwd_ms``, ``comm_ms``, ``optimizer_ms`` and ``step_other_ms``
        (``compute_ms`` in parts, mean per step: :mod:`workers.step_parts`; ``comm_ms`` ``None``
        where a step's sync could not be told apart), ``data_wait_share``,
        ``gpu_busy_share`` (compute time over the wall time since the first measured step:
        host work between steps, data generation and
        checkpoints leave the device idle) and ``energy_per_sample_j`` (this rank's device
        over its own samples: the job's figure when ranks are alike)."""
        gpu = self.device.type == "cuda" and self.started is not None
        return {
            "peak_mem_mb": self.peak.peak_mb(),
            "peak_mem_scope": self.peak.scope,
            "data_wait_ms": mean_ms(self.wait_s, self.steps),
            "compute_ms": mean_ms(self.compute_s, self.steps),
            "data_wait_p95_ms": self.waits.quantile(0.95),
            # the timed step in parts, mean per step: they add up to compute_ms
            "fwd_bwd_ms": mean_ms(self.fwd_bwd_s, self.parts_steps),
            "comm_ms": None if self.comm_unknown else mean_ms(self.comm_s, self.parts_steps),
            "optimizer_ms": mean_ms(self.optimizer_s, self.parts_steps),
            "step_other_ms": mean_ms(self.other_s, self.parts_steps),
            "data_wait_share": data_wait_share(self.wait_s, self.compute_s),
            "gpu_busy_share": busy_share(self.compute_s, now - (self.started or now))
            if gpu
            else None,
            "energy_per_sample_j": energy_per_sample_j(
                self.energy_start_mj, self.nvml.energy_mj(), self.samples
            )
            if gpu
            else None,
        }
