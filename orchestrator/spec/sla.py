"""What a job needs (``sla:``): a throughput floor or an amount of work by a deadline, or a
latency ceiling."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, model_validator

from orchestrator.spec.base import MAX_RATE, MAX_SECONDS, MAX_WORK, SpecModel


class ThroughputSLA(SpecModel):
    """A floor on throughput, or an amount of work to finish within a deadline."""

    min_samples_per_s: float | None = Field(
        default=None, gt=0, le=MAX_RATE, description="a floor on throughput, in samples per second"
    )
    min_tokens_per_s: float | None = Field(
        default=None, gt=0, le=MAX_RATE, description="a floor on throughput, in tokens per second"
    )
    work_samples: int | None = Field(
        default=None,
        gt=0,
        le=MAX_WORK,
        description="samples to process by deadline_s: the run's length (its steps follow from "
        "the global batch)",
    )
    work_tokens: int | None = Field(
        default=None,
        gt=0,
        le=MAX_WORK,
        description="tokens to process by deadline_s: the run's length (the workload turns them "
        "into steps; not for a command)",
    )
    deadline_s: float | None = Field(
        default=None,
        gt=0,
        le=MAX_SECONDS,
        description="seconds after submission by which the work should be done",
    )

    @model_validator(mode="after")
    def _one_goal(self) -> Self:
        floors = [self.min_samples_per_s, self.min_tokens_per_s]
        works = [self.work_samples, self.work_tokens]
        n_floor = sum(v is not None for v in floors)
        n_work = sum(v is not None for v in works)
        if n_floor + n_work != 1:
            raise ValueError(
                "give exactly one of min_samples_per_s, min_tokens_per_s, "
                "work_samples (with deadline_s) or work_tokens (with deadline_s)"
            )
        if n_work and self.deadline_s is None:
            raise ValueError("deadline_s is required with work_samples/work_tokens")
        if n_floor and self.deadline_s is not None:
            raise ValueError("deadline_s goes with work_samples/work_tokens only")
        return self


class LatencySLA(SpecModel):
    """A ceiling in milliseconds on a percentile of step (request) time."""

    max_ms: float = Field(
        gt=0,
        le=1000 * MAX_SECONDS,
        description="the ceiling in milliseconds on a step's time (a service's: a request's, "
        "arrival to answer)",
    )
    percentile: Literal[50, 95, 99] = Field(default=95, description="the percentile it is on")
    start_within_s: float = Field(
        default=60.0,
        gt=0,
        le=MAX_SECONDS,
        description="seconds after submission it should start by",
    )


class SLA(SpecModel):
    """What the job needs: bulk jobs state throughput, interactive jobs state latency."""

    throughput: ThroughputSLA | None = Field(
        default=None, description="a throughput floor or work by a deadline (class bulk needs it)"
    )
    latency: LatencySLA | None = Field(
        default=None, description="a latency ceiling (class interactive needs it)"
    )
