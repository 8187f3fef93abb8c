"""A command-mode script's step reports, measured as the harness measures its own steps.

The script says, per optimizer step, how long it took (the time between two ``job.report()``
calls), its samples, tokens and loss, and, when it reads its batches through ``job.loader``,
how much of that time it waited for them (see :mod:`workers.job`). :class:`CommandSteps` keeps
the same figures :class:`workers.harness.Harness` keeps for a built-in workload (a
:class:`~workers.latency.LatencySketch` over measured steps, the guard's
:class:`~workers.window.RecentSteps`, samples and time over measured steps, warm-up steps of
each run left out, the data wait apart from the step) and makes the same report dict and
``RunResult``, so the store, the SLA guard, the verdicts and ``/metrics`` treat a command job
as any other. Its :meth:`state` is kept by the worker between runs of the job, so a resumed run
continues the percentiles and throughput of the runs before it, as a harness checkpoint does.

The data wait is taken out of the step, as the harness times its steps after their batches
are made: a step's time is then the script's compute, its percentiles and samples/s what the
tuner's settings change, and the wait is reported apart (``data_wait_share``,
``reads_dataset``), so a throughput SLA judges the job at the wall clock
(``orchestrator.sla.wall_share``) and the tuner's loader stage sees it. A script that does not
use ``job.loader`` reports no wait: its steps hold its loading, and its wait figures are
``None``.
"""

from __future__ import annotations

import math
import time
from typing import Any

from workers.latency import LatencySketch
from workers.ratios import data_wait_share, mean_ms
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
        # this run's data wait over its measured steps (job.loader's), apart from compute
        self.timed_waits = False
        self.wait_s = 0.0
        self.compute_s = 0.0
        self.waits = LatencySketch()
        state = state or {}
        if state:
            self.latency.merge(LatencySketch.from_state(state["latency"]))
            self.measured_samples = int(state["measured_samples"])
            self.measured_tokens = int(state["measured_tokens"])
            self.measured_time_s = float(state["measured_time_s"])
            self.checkpoint_step = self.step = int(state["checkpoint_step"])
        self.resumed_from = self.checkpoint_step

    def add(self, message: dict[str, Any]) -> bool:
        """Take one step message ``{step, s, samples, tokens, loss, wait_s}`` (``wait_s``:
        the part of ``s`` spent waiting in ``job.loader``, ``None`` without it); whether it was
        one (anything malformed is ignored: the script is the team's code)."""
        try:
            seconds = float(message["s"])
            samples = int(message["samples"])
            step = int(message["step"])
            tokens = int(message["tokens"]) if message.get("tokens") is not None else 0
            loss = float(message["loss"]) if message.get("loss") is not None else None
            wait = float(message["wait_s"]) if message.get("wait_s") is not None else None
        except (KeyError, TypeError, ValueError):
            return False
        if not (math.isfinite(seconds) and seconds >= 0 and samples >= 0 and tokens >= 0):
            return False
        if wait is not None and not (math.isfinite(wait) and wait >= 0):
            return False
        if wait is not None:
            self.timed_waits = True
            wait = min(wait, seconds)  # within the step's interval; a clock's jitter aside
            seconds -= wait  # the step itself: the harness's clock starts after the batch
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
            if wait is not None:
                self.wait_s += wait
                self.compute_s += seconds
                self.waits.add(wait * 1000.0)
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
        """Percentiles, throughput, the data wait and the recent window, as the harness
        reports them."""
        t = self.measured_time_s
        return {
            "p50_ms": self.latency.quantile(0.50),
            "p95_ms": self.latency.quantile(0.95),
            "p99_ms": self.latency.quantile(0.99),
            "samples_per_s": self.measured_samples / t if t > 0 else None,
            "tokens_per_s": self.measured_tokens / t if t > 0 and self.measured_tokens else None,
            "measured_steps": self.latency.count,
            **self.data_wait(),
            **self.recent.summary(time.perf_counter()),
        }

    def data_wait(self) -> dict[str, Any]:
        """This run's data wait over its measured steps (``None`` figures when the script
        reads no batches through ``job.loader``: its loading is out of the worker's sight),
        and ``reads_dataset``: whether the wait is the job's own loading."""
        if not self.timed_waits:
            return {
                "data_wait_ms": None,
                "compute_ms": None,
                "data_wait_p95_ms": None,
                "data_wait_share": None,
                "reads_dataset": False,
            }
        steps = self.waits.count
        return {
            "data_wait_ms": mean_ms(self.wait_s, steps),
            "compute_ms": mean_ms(self.compute_s, steps),
            "data_wait_p95_ms": self.waits.quantile(0.95),
            "data_wait_share": data_wait_share(self.wait_s, self.compute_s),
            "reads_dataset": True,
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
            dataset=m["reads_dataset"],
            data_wait_ms=m["data_wait_ms"],
            compute_ms=m["compute_ms"],
            data_wait_p95_ms=m["data_wait_p95_ms"],
            data_wait_share=m["data_wait_share"],
        )
