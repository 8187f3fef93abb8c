"""A service (``serve:``): its offered load, its batcher and its quantization."""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import Field, model_validator

from orchestrator.names import ruled
from orchestrator.spec.base import SpecModel

MAX_SERVE_BATCH = 4096
MAX_TRACE = 100_000


class ServeSpec(SpecModel):
    """A service: its clients' requests reach its endpoint (``endpoint``, the default) and are
    answered by the job's replicas (one per GPU), each with a dynamic batcher
    (``workers.serving``); ``rate_rps`` or ``trace`` is the offered load its SLA is about and the
    tuner tunes for (``orch load`` sends such a load from outside). A batch leaves
    when it holds ``run.micro_batch`` requests or its oldest request has waited
    ``max_delay_ms`` (``null``: a fixed batch, which waits until full). ``sla.latency`` is then
    about requests, arrival to answer; the service runs for ``run.duration_s``.
    ``quantize: int8`` serves the model with int8 dynamic quantization of its linear layers
    (CPU kernels), once its outputs on seeded inputs are within ``quant_tolerance`` (relative
    L2 error) of fp32's: a model further off is refused, and the error is reported
    (``quant_error``).

    The offered load may change while the service runs: a ``trace`` is its arrival times, so
    a trace whose gaps halve then grow again is a load that doubles then falls (the trace
    repeats to cover ``run.duration_s``). With ``resources.gpus`` a range, the SLA guard scales
    the replicas within it as the load and the tail move (``policies.replicas``). A service
    with an ``endpoint`` is resized in place (replicas added, or drained, while the others
    serve); a self-loading one (``endpoint: false``) is relaunched, and ``start_at`` (the
    wall-clock time, Unix seconds, of the stream's time 0; ``null``: when the run starts) lets
    the new run go on where the stream is: the scheduler sets it on a service it resizes, with
    ``stopped_at`` (when the run before last reported serving: a service stopped for a resize
    is killed at once). Requests due while it restarts are not offered to it: the new run
    counts those due since ``stopped_at`` as dropped. ``run.duration_s`` counts from the
    stream's start.
    """

    rate_rps: float | None = Field(
        default=None,
        gt=0,
        le=1e6,
        description="the offered load: Poisson arrivals at this many requests per second, "
        "seeded by run.seed (give this or trace)",
    )
    trace: list[float] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_TRACE,
        description="the offered load as arrival times in seconds, each >= 0 and >= the one "
        "before, repeated to cover run.duration_s (give this or rate_rps)",
    )
    max_delay_ms: float | None = Field(
        default=2.0,
        ge=0,
        le=60_000,
        description="a batch leaves when full or when its oldest request has waited this long "
        "(0: no window; null: a fixed batch, which waits until full)",
    )
    timeout_ms: float | None = Field(
        default=None,
        gt=0,
        le=3_600_000,
        description="requests that would wait longer are dropped and counted (unset: none is)",
    )
    quantize: Literal["none", "int8"] = Field(
        default="none",
        description="int8: int8 dynamic quantization of the model's linear layers (CPU kernels)",
    )
    quant_tolerance: float = Field(
        default=0.05,
        gt=0,
        le=1,
        description="the largest relative L2 error of an int8 model's outputs against fp32's, "
        "on seeded inputs; a model further off is refused",
    )
    start_at: float | None = Field(
        default=None,
        gt=0,
        description="the wall-clock time (Unix seconds) of the stream's time 0 (unset: when the "
        "run starts); the scheduler sets it on a service it resizes",
    )
    stopped_at: float | None = Field(
        default=None,
        gt=0,
        description="when the run before last reported serving (Unix seconds), set by the "
        "scheduler with start_at: requests due since then count as dropped",
    )
    from_job: str | None = Field(
        default=None,
        pattern=ruled(
            r"^[a-z0-9][a-z0-9._-]*$",
            "must be a job id or name: lowercase letters, digits, '.', '_' or '-', starting with "
            "a letter or digit",
        ),
        max_length=200,
        description="serve the model a finished job of the same team trained: its final "
        "checkpoint (the service's workload is infer with model gpt or mlp and the model "
        "arguments that job trained with); a job id or name",
    )
    weights: dict[str, Any] | None = Field(
        default=None,
        description="set by the scheduler for from_job: where that job's checkpoint is and "
        "what it was trained as (not for job files)",
    )
    endpoint: bool = Field(
        default=True,
        description="true (the default): answer the real requests clients send to the "
        "service's endpoint (POST /v1/services/{id}/infer; orch load sends them); rate_rps or "
        "trace is the load the SLA is judged at and the tuner tunes for. false: the service "
        "load-tests itself, its worker generating rate_rps or trace as requests and answering "
        "no client (benchmarks, the replica policy's relaunch path)",
    )

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.rate_rps is None) == (self.trace is None):
            raise ValueError(
                "give exactly one of serve.rate_rps (requests per second) and serve.trace "
                "(arrival times in seconds)"
            )
        last = 0.0
        for i, t in enumerate(self.trace or ()):
            if t < 0 or t < last:
                raise ValueError(f"trace[{i}] must be >= 0 and >= the time before it, got {t:g}")
            last = t
        return self

    def harness(self) -> dict[str, Any]:
        """The settings as the worker's ``HarnessConfig.serve`` takes them (seconds)."""
        return {
            "rate_rps": self.rate_rps,
            "trace": list(self.trace) if self.trace is not None else None,
            "max_delay_s": None if self.max_delay_ms is None else self.max_delay_ms / 1000.0,
            "timeout_s": None if self.timeout_ms is None else self.timeout_ms / 1000.0,
            "quantize": self.quantize,
            "quant_tolerance": self.quant_tolerance,
            "start_at": self.start_at,
            "stopped_at": self.stopped_at,
            "endpoint": self.endpoint,
            "weights": self.weights,
        }
