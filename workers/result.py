"""What a harness run reports: the periodic report dict and the final :class:`RunResult`.

Both are plain JSON-serialisable values (no NaN: a figure that cannot be measured yet, such as
a percentile before the first measured step, is ``None``), so they cross Ray, Redis and the CLI
unchanged.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

__all__ = ["REPORT_KEYS", "RunResult"]

# Keys present in every report dict (NVML adds gpu_* keys when available). ``status`` is
# "running" in periodic reports, then "finished" or "stopped" in the final one.
REPORT_KEYS: tuple[str, ...] = (
    "status",
    "step",
    "total_steps",
    "elapsed_s",
    "p50_ms",
    "p95_ms",
    "p99_ms",
    "samples_per_s",
    "tokens_per_s",
    "peak_mem_mb",
    "peak_mem_scope",
    "data_wait_ms",
    "compute_ms",
    "data_wait_p95_ms",
    "data_wait_share",
    "gpu_busy_share",
    "energy_per_sample_j",
    "loss",
    "device",
    "rank",
    "world_size",
    "global_batch",
    "measured_steps",
    "warmup_steps",
    "first_step_at",
    "checkpoint_write_s",
    "nvml",
)


@dataclass
class RunResult:
    """The outcome of one :meth:`workers.harness.Harness.run`.

    Attributes:
        status: ``finished`` (reached ``steps`` or ``duration_s``), ``stopped`` (asked to) or
            ``fenced`` (deposed: a newer run of the job owns it; nothing was written).
        steps_done: optimizer steps completed in total, including those before a resume.
        resumed_from_step: the checkpoint step this run started from, ``None`` if fresh.
        loss: the last step's loss averaged over ranks (``None`` for inference workloads or
            when no step ran).
        p50_ms, p95_ms, p99_ms: step-latency percentiles over measured steps (warm-up steps of
            each run excluded; measured steps from before a resume included).
        samples_per_s, tokens_per_s: global throughput (all ranks) over measured steps;
            ``tokens_per_s`` is ``None`` for workloads without tokens.
        peak_mem_mb: this run's peak: CUDA peak allocated memory, or on the CPU the peak RSS
            since the run began (see ``peak_mem_scope``).
        peak_mem_scope: ``run`` (the peak was restarted when this run began; a command job's:
            the peak of the run's own processes, its cgroup's where there is one), or ``process``
            (a CPU where it cannot be: the worker process's lifetime peak, earlier runs
            included).
        data_wait_ms, compute_ms: mean per measured step of this run: waiting for the step's
            data (the workload's ``make_batch``, or the loader's next micro-batches for a
            dataset workload; outside the timed step), and the timed step itself.
        data_wait_p95_ms: the 95th percentile of the measured steps' data waits (a loader
            that stalls now and then shows here, not in the mean).
        fwd_bwd_ms, comm_ms, optimizer_ms, step_other_ms: ``compute_ms`` in parts, mean per
            measured step (:mod:`workers.step_parts`): forward and backward, the gradient
            sync's exposed time (``None`` where it cannot be told from the backward: no
            accumulation), the optimizer's step, and the rest; ``None`` for a command job.
        data_wait_share: ``data_wait / (data_wait + compute)`` over this run's measured steps.
        gpu_busy_share: compute time over wall time since this run's first measured step, on
            CUDA; ``None`` on the CPU.
        energy_per_sample_j: joules per sample (NVML's total-energy counter of this rank's GPU
            over its samples in this run's measured steps); ``None`` without NVML or on the CPU.
        measured_steps: how many step latencies the percentiles cover.
        warmup_steps: steps excluded at the start of this run.
        elapsed_s: wall time of this run.
        device: where it ran (``cpu`` or ``cuda:N``).
        world_size: data-parallel degree.
        global_batch: samples per optimizer step over all ranks.
        telemetry: NVML summary (``{"nvml": "unavailable"}`` without it).
        param_fingerprint: sum of absolute values of all parameters (float64), a cheap check
            that two runs ended with the same model.
        checkpoint_path: the last checkpoint written or resumed from, if any.
        first_step_at: wall-clock time (``time.time()``) when this run's first optimizer step
            finished, resumed runs included; ``None`` when no step ran. Reported with the
            first report, right after step 1, so submit-to-first-step can be measured.
        checkpoint_write_s: seconds rank 0 took to write this run's last checkpoint (state
            dicts, serialisation, fsync, rename); ``None`` when this run wrote none, and on
            other ranks.
        forward_only: the workload is forward-only (``Workload.train`` is False): the tuner's
            probe reads it to shape the search space (accumulation 1, no batch to keep).
        dataset: the workload gave a dataset, read through the harness's loader (a command
            job's script: its batches through ``job.loader``): the tuner's probe reads it to
            know whether the loader's knobs can matter.
        quant_error: a service serving an int8 model: its outputs' relative L2 error against
            fp32's on seeded inputs (``workers.quantize``); ``None`` otherwise.
        offered, dropped: a service's requests that arrived, and those that waited past its
            timeout (``None`` for a run that is not a service).
    """

    status: str
    steps_done: int
    resumed_from_step: int | None
    loss: float | None
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    samples_per_s: float | None
    tokens_per_s: float | None
    peak_mem_mb: float
    measured_steps: int
    warmup_steps: int
    elapsed_s: float
    device: str
    world_size: int
    global_batch: int
    param_fingerprint: float
    telemetry: dict[str, Any] = field(default_factory=dict)
    checkpoint_path: str | None = None
    first_step_at: float | None = None
    checkpoint_write_s: float | None = None
    forward_only: bool = False
    dataset: bool = False
    peak_mem_scope: str = "run"
    data_wait_ms: float | None = None
    compute_ms: float | None = None
    data_wait_p95_ms: float | None = None
    fwd_bwd_ms: float | None = None
    comm_ms: float | None = None
    optimizer_ms: float | None = None
    step_other_ms: float | None = None
    data_wait_share: float | None = None
    gpu_busy_share: float | None = None
    energy_per_sample_j: float | None = None
    quant_error: float | None = None
    offered: int | None = None
    dropped: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict of every field."""
        return dataclasses.asdict(self)
