"""A service's trial: its own model served as a live replica serves it, loaded by ``orch
load``'s engine at the job's offered load, through the service endpoint's ingress.

Each trial (one config) starts the config's replicas (``config.gpus``) as a live service's
replicas run: a harness run with ``serve.endpoint`` (``workers.serve_endpoint.EndpointServe``)
taking its requests from the store's ingress stream (``orchestrator.store.ingress``), each
replica ready once its model is loaded and warm. The trial's stream is its own (the service
``trial:{job}:{token}``, its keys deleted once measured), so a trial never takes a live
request and no client's request reaches a trial. Once every replica is ready, the client
engine (``orchestrator.load.run_schedule``) sends the job's offered load (``serve.rate_rps``
seeded Poisson, or ``serve.trace``, for ``trial_s`` seconds: the schedules ``orch load --rate``
and ``--trace`` send) open loop, each request's latency from its intended send time to its
answer (no coordinated omission). The measurement keeps the load test's fields: request
p50/p95/p99, the requests answered per second (``samples_per_s``: a request is a sample, so
``gpus / samples_per_s`` is GPU-seconds per request), the requests offered and those not
answered (``dropped``), and a quantized model's output error against fp32. A quantization
over the tolerance is refused by the replica before it serves: the trial fails with its error
recorded, and the goal's ``accuracy`` constraint marks it infeasible.

Where the requests enter: at the ingress's producer side (``IngressStore.call``: the
append, the wait for the answer and the count, what the HTTP router does once its checks
pass), not over HTTP. This leaves out the API's share of a request (HTTP, routing, the token
and body checks), and on a loaded 2-core VM that share is most of a live request's time:
``bench/serving/trial_vs_run.py`` measured this trial's p99 at 0.17x (0.08-0.75) the run's
under ``orch load`` at 25 req/s (``bench/serving/README.md``, "A tuning trial against its
run"). Over HTTP a trial needs an API serving its service: the router serves only a job in the
store, running, to a token's holder. So a trial makes a job record and a member token in a
namespace of its own (5-150 ms), serves the API on a loopback port, and sends with ``orch
load``. Measured that way in the same bench, the trial's p99 was 0.39-1.06x the run's. It is
not done yet: with 2 s streams, its trials' p99 went past the tuning tests' ceilings, because a
fresh ``orch load`` process sent its first second's requests up to 160 ms late (the ingress
measured p99 42-92 ms for the same requests), and that process's start per stream tripled the
tests' time. A client kept warm across a trial's streams would fix both. Until then, a trial's
p99 is a lower bound of the run's.

A replica runs where a job's replica would: a built-in model in a thread of this process
(``workers.harness.Harness``), a team's model (an ``entry:``) in a sandboxed child
(``workers.sandbox.run_sandboxed``, fed by this process's ``RequestPump`` as a worker actor
feeds it: its own uid, a scrubbed environment, pipes only), so the tuner's process, which holds
the store's URL, never imports the team's code. The replicas share this process's device: on
a GPU host a trial of several replicas is slower than the run on as many GPUs (running them in
the tuning gang's actors is still to do, ``orchestrator.tuner.remote``).

Each trial serves ``streams`` seeded streams (seeds ``seed``, ``seed + 1``, ..., one after the
other on the same replicas), and its figures are the worst of them (the highest percentiles,
the lowest rate, the drops added up): a config must meet the ceiling on each. A stream that
drops a request ends the trial (the config is infeasible). A request unanswered within the
service's ``serve.timeout_ms``, or within ``max(trial_s, MIN_WAIT_S)`` without one, is dropped:
a config that queues requests for longer than the trial lasts cannot carry the load.
"""

from __future__ import annotations

import functools
import math
import re
import secrets
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from orchestrator.runtime.harness_config import harness_config
from orchestrator.tuner.evaluators.base import Evaluator, probe_config
from orchestrator.tuner.objective import Measurement
from orchestrator.tuner.space import Config, DeviceCaps

if TYPE_CHECKING:
    from orchestrator.load import LoadReport
    from orchestrator.store.ingress import ServiceFigures, TrialEndpoint

__all__ = ["ServeEvaluator"]

MAX_REPLICAS = 1024
"""The most replicas the search space may give (the device caps' ``max_gpus``)."""
READY_TIMEOUT_S = 180.0
"""How long a trial waits for its replicas to be ready: a sandboxed child imports torch
first (5-20 s on a loaded 2-core VM, several children at once)."""
MIN_WAIT_S = 2.0
"""The least a trial's request waits for its answer without a ``serve.timeout_ms``."""
STOP_WAIT_S = 60.0
"""How long a trial waits for its replicas to drain and end once measured."""
_REFUSED = re.compile(r"QuantizationRefused.*?outputs are ([0-9.eE+-]+)")


class ServeEvaluator(Evaluator):
    """Load-tests service configs through the ingress (see the module doc; its replicas
    import torch).

    Args:
        workload: built-in name or ``module:function`` entry point (forward-only).
        workload_args: its arguments.
        serve: the service's settings as the harness takes them (``ServeSpec.harness()``):
            its arrivals (``rate_rps`` or ``trace``), ``timeout_s``, ``quant_tolerance`` and
            ``weights``; the batcher's settings come from each config.
        redis_url, namespace: the store whose ingress the trials go through.
        trial_s: seconds of traffic per stream.
        streams: seeded streams per trial (see the module doc).
        caps: the device (``DeviceCaps.detect()``); its ``max_gpus`` is not a limit here.
        num_threads: torch CPU threads per replica (1 = one virtual GPU slot's worth).
        seed: the job's seed (arrivals, inputs and the accuracy check's inputs).
        job_id: the job tuned (a sandboxed trial runs under this job's uid on a root host).
    """

    def __init__(
        self,
        workload: str,
        workload_args: dict[str, Any] | None,
        serve: dict[str, Any],
        *,
        redis_url: str,
        namespace: str,
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
        self.serve = dict(serve)
        self.redis_url = redis_url
        self.namespace = namespace
        self.seed = seed
        self.num_threads = num_threads
        self.job_id = job_id
        if streams < 1:
            raise ValueError(f"streams must be >= 1, got {streams}")
        if not trial_s > 0:
            raise ValueError(f"trial_s must be > 0, got {trial_s}")
        self.trial_s = trial_s
        self.streams = streams
        self.last_ingress: ServiceFigures | None = None
        """The last trial's requests as its ingress counted them (before its keys went)."""
        self._forward_only: bool | None = None

    def forward_only(self) -> bool:
        """Whether the workload is forward-only (a service's must be): a one-step probe run
        as a trial's replica runs (sandboxed for a team's model; once).

        Raises:
            the workload's own error when it cannot be built or its probe step fails.
        """
        if self._forward_only is None:
            probe = probe_config(self.workload, self.workload_args, self.seed)
            self._forward_only = bool(self._run(probe, lambda: False, None)["forward_only"])
        return self._forward_only

    def evaluate(self, config: Config) -> Measurement:
        """Load-test ``config`` through the ingress (see the module doc).

        Raises:
            whatever the workload raises (the tuner classifies OOM and crashes), or
            ``RuntimeError`` when its replicas are not ready in :data:`READY_TIMEOUT_S`.
        """
        from workers.quantize import DEFAULT_TOLERANCE

        t0 = time.perf_counter()
        try:
            reports, results = self._trial(config)
        except Exception as err:
            error = _refused(err)
            if error is None:
                raise
            tolerance = self.serve.get("quant_tolerance") or DEFAULT_TOLERANCE
            return Measurement(
                "error",
                cost_s=time.perf_counter() - t0,
                message=f"serve.quantize {config.quantize}: outputs are {error:.4f} (relative "
                f"L2) from fp32's, over serve.quant_tolerance {tolerance:g}",
                quant_error=error,
            )

        def worst(key: str) -> float | None:
            values = [getattr(r.latency, key) if r.latency else None for r in reports]
            numbers = [v for v in values if v is not None]
            return max(numbers) if numbers and len(numbers) == len(values) else None

        rates = [r.achieved_rps for r in reports if r.achieved_rps is not None]
        return Measurement(
            "ok",
            p50_ms=worst("p50"),
            p95_ms=worst("p95"),
            p99_ms=worst("p99"),
            samples_per_s=min(rates) if len(rates) == len(reports) else None,
            cost_s=time.perf_counter() - t0,
            offered=sum(r.requests for r in reports),
            dropped=sum(r.requests - r.statuses.get("200", 0) for r in reports),
            quant_error=next((r.get("quant_error") for r in results), None),
        )

    def trial_config(self, config: Config) -> dict[str, Any]:
        """The harness configuration of ``config``'s replicas: a live replica's (``serve.
        endpoint``), lasting at most as long as a trial may."""
        serve = {
            **self.serve,
            "max_delay_s": (config.max_delay_ms or 0.0) / 1000.0,
            "quantize": config.quantize,
            "endpoint": True,
            "start_at": None,
            "stopped_at": None,
        }
        longest = READY_TIMEOUT_S + self.streams * (self.trial_s + self._wait_s()) + STOP_WAIT_S
        return harness_config(
            self.workload,
            self.workload_args,
            config,
            duration_s=longest,
            warmup_steps=0,
            seed=self.seed,
            serve=serve,
        )

    def _wait_s(self) -> float:
        """How long a trial's request waits for its answer (see the module doc)."""
        timeout = self.serve.get("timeout_s")
        return float(timeout) if timeout else max(self.trial_s, MIN_WAIT_S)

    def _trial(self, config: Config) -> tuple[list[LoadReport], list[dict[str, Any]]]:
        """Start the replicas, load them once ready, stop them: the streams' reports and the
        replicas' results."""
        from orchestrator.store.ingress import ReplicaQueue, TrialEndpoint

        ns = self.namespace
        service = f"trial:{self.job_id}:{secrets.token_hex(6)}"
        endpoint = TrialEndpoint(self.redis_url, ns, service)
        hc = self.trial_config(config)
        stop = threading.Event()
        replicas = [
            _Replica(
                functools.partial(
                    self._run, hc, stop.is_set, ReplicaQueue(self.redis_url, ns, service), i
                )
            )
            for i in range(config.gpus)
        ]
        try:
            for r in replicas:
                r.start()
            facts = _await_ready(endpoint, replicas)
            reports = self._load(endpoint, service, facts)
        finally:
            stop.set()
            for r in replicas:
                r.join(STOP_WAIT_S)
            self.last_ingress = endpoint.close()
        return reports, [r.outcome() for r in replicas]

    def _load(
        self, endpoint: TrialEndpoint, service: str, facts: dict[str, Any]
    ) -> list[LoadReport]:
        """The streams, one after the other, through the ingress (see the module doc)."""
        import asyncio
        import json

        from orchestrator.load import ServiceInput, make_bodies, offered_schedule

        spec = ServiceInput.model_validate(facts["input"])
        wait = self._wait_s()

        async def streams() -> list[LoadReport]:
            from orchestrator.load import run_schedule

            ingress = endpoint.ingress()
            reports: list[LoadReport] = []
            try:
                for k in range(self.streams):
                    schedule = offered_schedule(self.serve, self.trial_s, self.seed + k)
                    bodies = make_bodies(spec, len(schedule.offsets), self.seed + k)
                    payloads = [json.loads(b) for b in bodies]  # made before the clock starts
                    send = _ingress_send(ingress, service, payloads, wait)
                    report = await run_schedule(schedule, send, timeout_s=wait)
                    reports.append(report)
                    if report.statuses.get("200", 0) < report.requests:
                        break  # a drop: the config is infeasible whatever the other streams
            finally:
                await ingress.aclose()
            return reports

        return asyncio.run(streams())

    def _run(
        self,
        hc: dict[str, Any],
        should_stop: Callable[[], bool],
        requests: Any,
        replica: int = 0,
    ) -> dict[str, Any]:
        """Run ``hc`` where a job's replica of this workload would run; its ``RunResult``
        dict. ``requests``: the replica's queue at the ingress (``None`` for the probe)."""
        from workers.sandbox import needs_sandbox, run_sandboxed

        if needs_sandbox(self.workload):
            return run_sandboxed(
                hc,
                # one sandbox (uid, cgroup) per replica, as each replica of a run has its own
                job_id=self.job_id if replica == 0 else f"{self.job_id}-r{replica}",
                rank=0,
                world_size=1,
                init_method=None,
                checkpoint_dir=None,
                report=None,
                report_every_s=3600.0,
                should_stop=should_stop,
                fence=lambda: True,
                num_threads=self.num_threads,
                requests=requests,
            )
        from workers.config import HarnessConfig
        from workers.harness import Harness

        device = "cpu" if self.caps.kind == "cpu" else None
        harness = Harness(
            HarnessConfig.from_dict(hc),
            device=device,
            num_threads=self.num_threads,
            should_stop=should_stop,
            report_every_s=3600.0,
            requests=requests,
        )
        return harness.run().to_dict()


class _Replica(threading.Thread):
    """One of a trial's replicas, run in a thread (its run blocks until it is stopped)."""

    def __init__(self, run: Callable[[], dict[str, Any]]) -> None:
        super().__init__(name="trial-replica", daemon=True)
        self._run_it = run
        self.result: dict[str, Any] | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self._run_it()
        except BaseException as err:  # handed to the trial, which raises it
            self.error = err

    def outcome(self) -> dict[str, Any]:
        """Its run's result.

        Raises:
            what its run raised, or ``RuntimeError`` when it has not ended.
        """
        if self.error is not None:
            raise self.error
        if self.result is None:
            raise RuntimeError(f"a trial's replica did not end within {STOP_WAIT_S:g} s")
        return self.result


def _await_ready(endpoint: TrialEndpoint, replicas: list[_Replica]) -> dict[str, Any]:
    """Wait until every replica is ready at the ingress; what one of them said of itself.

    Raises:
        what a replica raised before it was ready; ``RuntimeError`` past
        :data:`READY_TIMEOUT_S`.
    """
    from orchestrator.store.ingress import ready_facts

    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        ready = ready_facts(endpoint.ready(), time.time())
        if len(ready) >= len(replicas):
            return next(iter(ready.values()))
        for r in replicas:
            if not r.is_alive():
                r.outcome()  # raises what it raised
                raise RuntimeError("a trial's replica ended before it was ready")
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{len(ready)} of {len(replicas)} trial replicas ready after {READY_TIMEOUT_S:g} s"
            )
        time.sleep(0.05)


def _ingress_send(
    ingress: Any, service: str, payloads: list[dict[str, Any]], timeout_s: float
) -> Callable[[int], Any]:
    """Request ``i`` (``payloads[i % len]``) into the trial's ingress (``IngressStore.call``):
    its outcome, and the loop time it left."""
    import asyncio

    async def send(i: int) -> tuple[str, float | None]:
        left = asyncio.get_running_loop().time()
        outcome = await ingress.call(service, payloads[i % len(payloads)], timeout_s)
        return outcome, left

    return send


def _refused(err: BaseException) -> float | None:
    """The output error of a quantization a replica refused (``None``: not a refusal). From
    a sandboxed child it arrives as text (``SandboxError("QuantizationRefused: ...")``)."""
    from workers.quantize import QuantizationRefused

    if isinstance(err, QuantizationRefused):
        return err.error
    found = _REFUSED.search(str(err)) if "QuantizationRefused" in str(err) else None
    if found is None:
        return None
    try:
        return float(found.group(1).rstrip("."))
    except ValueError:
        return math.nan
