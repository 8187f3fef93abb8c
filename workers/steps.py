"""A command-mode script's step reports, measured as the harness measures its own steps.

The script says, per optimizer step, how long it took (the time between two ``job.report()``
calls), its samples, tokens and loss (see :mod:`workers.job`). :class:`CommandSteps` keeps the
same figures :class:`workers.harness.Harness` keeps for a built-in workload (a
:class:`~workers.latency.LatencySketch` over measured steps, the guard's
:class:`~workers.window.RecentSteps`, samples and time over measured steps, warm-up steps of
each run left out) and makes the same report dict and ``RunResult``, so the store, the SLA
guard, the verdicts and ``/metrics`` treat a command job as any other. Its :meth:`state` is
kept by the worker between runs of the job, so a resumed run continues the percentiles and
throughput of the runs before it, as a harness checkpoint does.
"""

from __future__ import annotations

import math
import time
from typing import Any

from workers.latency import LatencySketch
from workers.result import RunResult
from workers.window import RecentSteps

__all__ = ["CommandSteps"]


class CommandSteps:
    """The measured steps of a command job's runs (see the module doc).

    Args:
        warmup_steps: steps of this run left out of the measurements.
        global_batch: samples per step the run is set up for (reported as such).
        total_steps: the run's length in steps (``None``: a run for a set time).
        rank, world_size: reported as given.
        state: what :meth:`state` returned at the end of an earlier run of the job.
    """

    def __init__(
        self,
        *,
        warmup_steps: int,
        global_batch: int,
        total_steps: int | None,
        rank: int = 0,
        world_size: int = 1,
        state: dict[str, Any] | None = None,
    ) -> None:
        self.started = time.perf_counter()
        self.warmup_steps = warmup_steps
        self.global_batch = global_batch
        self.total_steps = total_steps
        self.rank, self.world_size = rank, world_size
        self.latency = LatencySketch()
        self.recent = RecentSteps()
        self.measured_samples = 0
        self.measured_tokens = 0
        self.measured_time_s = 0.0
        self.local_steps = 0
        self.step = 0
        self.loss: float | None = None
        self.first_step_at: float | None = None
        self.checkpoint_step: int | None = None
        self.checkpoint_at: float | None = None
        state = state or {}
        if state:
            self.latency.merge(LatencySketch.from_state(state["latency"]))
            self.measured_samples = int(state["measured_samples"])
            self.measured_tokens = int(state["measured_tokens"])
            self.measured_time_s = float(state["measured_time_s"])
            self.checkpoint_step = self.step = int(state["checkpoint_step"])
        self.resumed_from = self.checkpoint_step

    def add(self, message: dict[str, Any]) -> bool:
        """Take one step message ``{step, s, samples, tokens, loss}``; whether it was one
        (anything malformed is ignored: the script is the team's code)."""
        try:
            seconds = float(message["s"])
            samples = int(message["samples"])
            step = int(message["step"])
            tokens = int(message["tokens"]) if message.get("tokens") is not None else 0
            loss = float(message["loss"]) if message.get("loss") is not None else None
        except (KeyError, TypeError, ValueError):
            return False
        if not (math.isfinite(seconds) and seconds >= 0 and samples >= 0 and tokens >= 0):
            return False
        now = time.perf_counter()
        self.step = step
        self.loss = loss if loss is None or math.isfinite(loss) else None
        self.local_steps += 1
        if self.first_step_at is None:
            self.first_step_at = time.time()  # wall clock: compared with submission times
        if self.local_steps > self.warmup_steps:
            self.latency.add(seconds * 1000.0)
            self.measured_samples += samples
            self.measured_tokens += tokens
            self.measured_time_s += seconds
            self.recent.add(now, seconds, samples)
        return True

    def checkpointed(self, step: object) -> None:
        """The script finished a checkpoint of ``step``."""
        if isinstance(step, int) and not isinstance(step, bool) and step >= 0:
            self.checkpoint_step = step
            self.checkpoint_at = time.time()

    def state(self) -> dict[str, Any] | None:
        """What the next run of the job continues from: the figures up to the last
        checkpoint's step (``None`` when the script never checkpointed)."""
        if self.checkpoint_step is None:
            return None
        return {
            "checkpoint_step": self.checkpoint_step,
            "latency": self.latency.state(),
            "measured_samples": self.measured_samples,
            "measured_tokens": self.measured_tokens,
            "measured_time_s": self.measured_time_s,
        }

    def metrics(self) -> dict[str, Any]:
        """Percentiles, throughput and the recent window, as the harness reports them."""
        t = self.measured_time_s
        return {
            "p50_ms": self.latency.quantile(0.50),
            "p95_ms": self.latency.quantile(0.95),
            "p99_ms": self.latency.quantile(0.99),
            "samples_per_s": self.measured_samples / t if t > 0 else None,
            "tokens_per_s": self.measured_tokens / t if t > 0 and self.measured_tokens else None,
            "measured_steps": self.latency.count,
            **self.recent.summary(time.perf_counter()),
        }

    def report(self, status: str, peak_mem_mb: float) -> dict[str, Any]:
        """The report dict (``workers.result.REPORT_KEYS``) of the run as it stands."""
        return {
            "status": status,
            "step": self.step,
            "total_steps": self.total_steps,
            "elapsed_s": time.perf_counter() - self.started,
            "loss": self.loss,
            "device": "command",
            "rank": self.rank,
            "world_size": self.world_size,
            "global_batch": self.global_batch,
            "warmup_steps": self.warmup_steps,
            "first_step_at": self.first_step_at,
            "checkpoint_write_s": None,
            "checkpoint_at": self.checkpoint_at,
            "time_left_s": None,
            "peak_mem_mb": peak_mem_mb,
            "peak_mem_scope": "run",  # the run's own processes (workers.command's meter)
            # the script's data loading is inside its step, out of the worker's sight
            "data_wait_ms": None,
            "compute_ms": None,
            "data_wait_p95_ms": None,
            "data_wait_share": None,
            "gpu_busy_share": None,
            "energy_per_sample_j": None,
            "nvml": "unavailable",
            **self.metrics(),
        }

    def result(self, status: str, peak_mem_mb: float, checkpoint_dir: str | None) -> RunResult:
        """The run's ``RunResult``. ``param_fingerprint`` is 0.0: the model is the script's,
        out of the worker's sight (compare final losses instead). ``peak_mem_mb``: the peak of
        this run's own processes."""
        m = self.metrics()
        return RunResult(
            status=status,
            steps_done=self.step,
            resumed_from_step=self.resumed_from,
            loss=self.loss,
            p50_ms=m["p50_ms"],
            p95_ms=m["p95_ms"],
            p99_ms=m["p99_ms"],
            samples_per_s=m["samples_per_s"],
            tokens_per_s=m["tokens_per_s"],
            peak_mem_mb=peak_mem_mb,
            measured_steps=m["measured_steps"],
            warmup_steps=self.warmup_steps,
            elapsed_s=time.perf_counter() - self.started,
            device="command",
            world_size=self.world_size,
            global_batch=self.global_batch,
            param_fingerprint=0.0,
            telemetry={"nvml": "unavailable"},
            checkpoint_path=checkpoint_dir if self.checkpoint_step is not None else None,
            first_step_at=self.first_step_at,
            peak_mem_scope="run",
        )
