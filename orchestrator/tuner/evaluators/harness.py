"""The real thing: a trial is a short profiling run of the job's workload in the worker harness.

The same :class:`workers.harness.Harness` that runs jobs runs the trial (rule 3: the harness
applies precision, accumulation, checkpointing and compile the same way for every workload):
``warmup_steps`` excluded, then ``measured_steps`` giving p50/p95/p99 step latency, throughput
and peak memory. In-process, so one trial uses one device; multi-GPU trials need the pool
(placement group of worker actors, as ``orchestrator.runtime.gang_run`` runs jobs).
"""

from __future__ import annotations

import gc
import time
from typing import Any

from orchestrator.runtime.harness_config import harness_config
from orchestrator.tuner.evaluators.base import Evaluator, probe_config
from orchestrator.tuner.objective import Measurement
from orchestrator.tuner.space import Config, DeviceCaps

__all__ = ["HarnessEvaluator"]


class HarnessEvaluator(Evaluator):
    """Profiles configs in this process with the worker harness (imports torch).

    Args:
        workload: built-in name or ``module:function`` entry point.
        workload_args: its arguments.
        caps: the device (``DeviceCaps.detect()`` by default; at most one GPU here).
        warmup_steps: steps excluded from the figures (compile, allocator and cache warm-up).
        measured_steps: steps measured.
        num_threads: torch CPU threads (1 = one virtual GPU slot's worth).
        seed: the job's seed.
    """

    def __init__(
        self,
        workload: str,
        workload_args: dict[str, Any] | None = None,
        *,
        caps: DeviceCaps | None = None,
        warmup_steps: int = 3,
        measured_steps: int = 10,
        num_threads: int | None = 1,
        seed: int = 0,
    ) -> None:
        self.workload = workload
        self.workload_args = dict(workload_args or {})
        self.caps = caps if caps is not None else DeviceCaps.detect(max_gpus=1)
        self.warmup_steps = warmup_steps
        self.measured_steps = measured_steps
        self.num_threads = num_threads
        self.seed = seed
        self._probe: dict[str, Any] | None = None

    def forward_only(self) -> bool:
        """The workload's answer to a one-step probe run here (once; see ``probe_config``)."""
        return bool(self._probed()["forward_only"])

    def reads_dataset(self) -> bool:
        """Whether the probe's harness read a dataset through its loader."""
        return bool(self._probed()["dataset"])

    def _probed(self) -> dict[str, Any]:
        if self._probe is None:
            from workers.config import HarnessConfig
            from workers.harness import Harness

            hc = HarnessConfig.from_dict(probe_config(self.workload, self.workload_args, self.seed))
            try:
                self._probe = Harness(hc, num_threads=self.num_threads).run().to_dict()
            finally:
                _release_memory()
        return self._probe

    def evaluate(self, config: Config) -> Measurement:
        """Run ``warmup_steps + measured_steps`` optimizer steps and report the measured ones.

        Raises:
            whatever the workload raises (the tuner classifies OOM and crashes).
        """
        if config.gpus > 1:
            return Measurement(
                "error", message="in-process profiling runs one GPU; multi-GPU trials need the pool"
            )
        from workers.config import HarnessConfig
        from workers.harness import Harness

        hc = HarnessConfig.from_dict(
            harness_config(
                self.workload,
                self.workload_args,
                config,
                steps=self.warmup_steps + self.measured_steps,
                warmup_steps=self.warmup_steps,
                seed=self.seed,
            )
        )
        t0 = time.perf_counter()
        try:
            result = Harness(hc, num_threads=self.num_threads).run()
        finally:
            _release_memory()
        return Measurement(
            "ok",
            p50_ms=result.p50_ms,
            p95_ms=result.p95_ms,
            p99_ms=result.p99_ms,
            samples_per_s=result.samples_per_s,
            tokens_per_s=result.tokens_per_s,
            peak_mem_mb=result.peak_mem_mb,
            data_wait_share=result.data_wait_share,
            gpu_busy_share=result.gpu_busy_share,
            energy_per_sample_j=result.energy_per_sample_j,
            cost_s=time.perf_counter() - t0,
            data_wait_ms=result.data_wait_ms,
            fwd_bwd_ms=result.fwd_bwd_ms,
            comm_ms=result.comm_ms,
            optimizer_ms=result.optimizer_ms,
            step_other_ms=result.step_other_ms,
        )


def _release_memory() -> None:
    """Free what a failed trial left (an OOM leaves tensors referenced from the traceback)."""
    gc.collect()
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
