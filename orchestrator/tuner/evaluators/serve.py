"""A service's trial: a short load test of the job's own model at its offered load.

The same arrivals (seeded Poisson at ``serve.rate_rps``, or the trace) for ``trial_s``
seconds go through the shipped batcher (``workers.serving``) with every batch a real timed
forward pass (``workers.serve_run.load_test``) under the config's max batch, max delay,
precision, quantization, compile and replica count. The measurement is the request latency
percentiles (arrival to answer, queueing included), the requests served per second
(``samples_per_s``: a request is a sample, so ``gpus / samples_per_s`` is GPU-seconds per
request), what was offered and dropped, and a quantized model's output error against fp32.
A quantization over the tolerance is not load-tested: the trial fails with its error recorded,
and the goal's ``accuracy`` constraint marks it infeasible.

A trial is a harness run (``HarnessConfig.serve["load_test"]``,
``workers.serve_run.load_test_run``), so it runs where a job's run would: a built-in model in
this process, a team's model (an ``entry:``) in a sandboxed child (``workers.sandbox.
run_sandboxed``, as a worker actor runs it: its own uid, a scrubbed environment, pipes only),
so the tuner's process, which holds the store's URL, never imports the team's code.

Each trial serves ``streams`` independent seeded arrival streams (seeds ``seed``,
``seed + 1``, ...), and its figures are the worst of them (the highest percentiles, the lowest
rate, the drops added up): a config must meet the ceiling on each. One short load test of a
config near saturation can pass by luck: on this 2-core machine, infer(gpt) at 5,000 req/s
on 3 replicas met p99 at 19 ms in its trial and missed at 103 ms on a re-run
(bench/serving/README.md).
"""

from __future__ import annotations

import math
import time
from typing import Any

from orchestrator.runtime.harness_config import harness_config
from orchestrator.tuner.evaluators.base import Evaluator, probe_config
from orchestrator.tuner.objective import Measurement
from orchestrator.tuner.space import Config, DeviceCaps

__all__ = ["ServeEvaluator"]

MAX_REPLICAS = 1024
"""The most replicas a load test may serve with (each is a copy of the one measured server)."""


class ServeEvaluator(Evaluator):
    """Load-tests service configs as harness runs (see the module doc; imports torch).

    Args:
        workload: built-in name or ``module:function`` entry point (forward-only).
        workload_args: its arguments.
        serve: the service's settings as the harness takes them (``ServeSpec.harness()``):
            its arrivals (``rate_rps`` or ``trace``), ``timeout_s`` and ``quant_tolerance``;
            the batcher's settings come from each config.
        trial_s: seconds of traffic per stream.
        streams: independent arrival streams per trial (see the module doc).
        caps: the device (``DeviceCaps.detect()``); its ``max_gpus`` is not a limit here
            (replicas are copies of the measured server).
        num_threads: torch CPU threads (1 = one virtual GPU slot's worth).
        seed: the job's seed (arrivals and the accuracy check's inputs).
        job_id: the job tuned (a sandboxed trial runs under this job's uid on a root host).
    """

    def __init__(
        self,
        workload: str,
        workload_args: dict[str, Any] | None,
        serve: dict[str, Any],
        *,
        trial_s: float = 2.0,
        streams: int = 2,
        caps: DeviceCaps | None = None,
        num_threads: int | None = 1,
        seed: int = 0,
        job_id: str = "tune",
    ) -> None:
        import dataclasses

        base = caps if caps is not None else DeviceCaps.detect(max_gpus=1)
        self.caps = dataclasses.replace(base, max_gpus=MAX_REPLICAS)
        self.workload = workload
        self.workload_args = dict(workload_args or {})
        self.serve = {k: v for k, v in serve.items() if k != "load_test"}
        self.seed = seed
        self.num_threads = num_threads
        self.job_id = job_id
        if streams < 1:
            raise ValueError(f"streams must be >= 1, got {streams}")
        if not trial_s > 0:
            raise ValueError(f"trial_s must be > 0, got {trial_s}")
        self.trial_s = trial_s
        self.streams = streams
        self._forward_only: bool | None = None

    def forward_only(self) -> bool:
        """Whether the workload is forward-only (a service's must be): a one-step probe run
        as a trial runs (sandboxed for a team's model; once).

        Raises:
            the workload's own error when it cannot be built or its probe step fails.
        """
        if self._forward_only is None:
            probe = probe_config(self.workload, self.workload_args, self.seed)
            self._forward_only = bool(self._run(probe)["forward_only"])
        return self._forward_only

    def evaluate(self, config: Config) -> Measurement:
        """Load-test ``config`` (see the module doc).

        Raises:
            whatever the workload raises (the tuner classifies OOM and crashes).
        """
        from workers.quantize import DEFAULT_TOLERANCE

        t0 = time.perf_counter()
        result = self._run(self.trial_config(config))
        cost = time.perf_counter() - t0
        if result["status"] == "refused":
            error = float(result.get("quant_error") or math.nan)
            tolerance = self.serve.get("quant_tolerance") or DEFAULT_TOLERANCE
            return Measurement(
                "error",
                cost_s=cost,
                message=f"serve.quantize {config.quantize}: outputs are {error:.4f} (relative "
                f"L2) from fp32's, over serve.quant_tolerance {tolerance:g}",
                quant_error=error,
            )
        return Measurement(
            "ok",
            p50_ms=result.get("p50_ms"),
            p95_ms=result.get("p95_ms"),
            p99_ms=result.get("p99_ms"),
            samples_per_s=result.get("samples_per_s"),
            cost_s=cost,
            offered=result.get("offered"),
            dropped=result.get("dropped"),
            quant_error=result.get("quant_error"),
        )

    def trial_config(self, config: Config) -> dict[str, Any]:
        """The harness configuration of ``config``'s load test."""
        serve = {
            **self.serve,
            "max_delay_s": (config.max_delay_ms or 0.0) / 1000.0,
            "quantize": config.quantize,
            "load_test": {"streams": self.streams, "replicas": config.gpus},
        }
        return harness_config(
            self.workload,
            self.workload_args,
            config,
            duration_s=self.trial_s,
            warmup_steps=0,
            seed=self.seed,
            serve=serve,
        )

    def _run(self, hc: dict[str, Any]) -> dict[str, Any]:
        """Run ``hc`` where a job's run of this workload would run; its ``RunResult`` dict."""
        from workers.sandbox import needs_sandbox, run_sandboxed

        if needs_sandbox(self.workload):
            return run_sandboxed(
                hc,
                job_id=self.job_id,
                rank=0,
                world_size=1,
                init_method=None,
                checkpoint_dir=None,
                report=None,
                report_every_s=3600.0,
                should_stop=lambda: False,
                fence=lambda: True,
                num_threads=self.num_threads,
            )
        from workers.config import HarnessConfig
        from workers.harness import Harness

        device = "cpu" if self.caps.kind == "cpu" else None
        harness = Harness(HarnessConfig.from_dict(hc), device=device, num_threads=self.num_threads)
        return harness.run().to_dict()
