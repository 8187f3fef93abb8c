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

Each trial serves ``streams`` independent seeded arrival streams (seeds ``seed``,
``seed + 1``, ...), and its figures are the worst of them (the highest percentiles, the lowest
rate, the drops added up): a config must meet the ceiling on each. One short load test of a
config near saturation can pass by luck: on this 2-core machine, infer(gpt) at 5,000 req/s
on 3 replicas met p99 at 19 ms in its trial and missed at 103 ms on a re-run
(bench/serving/README.md).
"""

from __future__ import annotations

import time
from typing import Any

from orchestrator.tuner.evaluators.base import Evaluator
from orchestrator.tuner.objective import Measurement
from orchestrator.tuner.space import Config, DeviceCaps

__all__ = ["ServeEvaluator"]

MAX_REPLICAS = 1024
"""The most replicas a load test may serve with (each is a copy of the one measured server)."""


class ServeEvaluator(Evaluator):
    """Load-tests service configs in this process (imports torch).

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
    ) -> None:
        import dataclasses

        from workers.serve_run import serve_arrivals

        base = caps if caps is not None else DeviceCaps.detect(max_gpus=1)
        self.caps = dataclasses.replace(base, max_gpus=MAX_REPLICAS)
        self.workload = workload
        self.workload_args = dict(workload_args or {})
        self.serve = dict(serve)
        self.seed = seed
        self.num_threads = num_threads
        if streams < 1:
            raise ValueError(f"streams must be >= 1, got {streams}")
        self.streams = [serve_arrivals(self.serve, trial_s, seed + k) for k in range(streams)]
        self._built: Any = None

    def _workload(self) -> Any:
        if self._built is None:
            import torch

            from workers.workloads.registry import build_workload

            if self.num_threads is not None:
                torch.set_num_threads(self.num_threads)
            torch.manual_seed(self.seed)  # as the harness builds it
            self._built = build_workload(self.workload, self.workload_args, self.seed)
        return self._built

    def forward_only(self) -> bool:
        """Whether the workload is forward-only (a service's must be)."""
        return not self._workload().train

    def evaluate(self, config: Config) -> Measurement:
        """Load-test ``config`` (see the module doc).

        Raises:
            whatever the workload raises (the tuner classifies OOM and crashes).
        """
        from workers.quantize import QuantizationRefused

        t0 = time.perf_counter()
        try:
            traces = [self._load_test(config, arrivals) for arrivals in self.streams]
        except QuantizationRefused as err:
            return Measurement(
                "error",
                cost_s=time.perf_counter() - t0,
                message=str(err)[:300],
                quant_error=err.error,
            )
        s = [t.summary() for t in traces]

        def worst(key: str) -> float | None:
            values = [x[key] for x in s]
            return None if any(v is None for v in values) else max(values)

        rates = [x["served_rps"] for x in s]
        return Measurement(
            "ok",
            p50_ms=worst("request_p50_ms"),
            p95_ms=worst("request_p95_ms"),
            p99_ms=worst("request_p99_ms"),
            samples_per_s=None if any(r is None for r in rates) else min(rates),
            cost_s=time.perf_counter() - t0,
            offered=sum(t.offered for t in traces),
            dropped=sum(t.dropped for t in traces),
            quant_error=traces[0].quant_error,
        )

    def _load_test(self, config: Config, arrivals: list[float]) -> Any:
        """One stream's load test of ``config`` (a ``workers.serving.ServeTrace``)."""
        import torch

        from workers.quantize import DEFAULT_TOLERANCE
        from workers.serve_run import load_test

        device = torch.device("cuda" if self.caps.kind == "cuda" else "cpu")
        return load_test(
            self._workload(),
            arrivals,
            max_batch=config.micro_batch,
            max_delay_s=(config.max_delay_ms or 0.0) / 1000.0,
            replicas=config.gpus,
            timeout_s=self.serve.get("timeout_s"),
            device=device,
            precision=config.precision,
            quantize=config.quantize,
            tolerance=float(self.serve.get("quant_tolerance") or DEFAULT_TOLERANCE),
            compile=config.compile,
            seed=self.seed,
        )
