"""``run.loader`` of a job file: the data loader's knobs, validated at the edge.

They apply to a workload that gives a dataset (the harness builds its loader; see
``workers.loader``) and are ignored for one that makes its own batches. The tuner may change
them when waiting for data is a material share of the step (``orchestrator.tuner.loader_stage``).
"""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from workers.loader_settings import MAX_CACHE_MB, MAX_PREFETCH, MAX_WORKERS, LoaderSettings

__all__ = ["LoaderSpec"]


class LoaderSpec(BaseModel):
    """The data loader's knobs."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    num_workers: int = Field(
        default=0,
        ge=0,
        le=MAX_WORKERS,
        description="processes that decode samples beside the step (0: the step's own)",
    )
    prefetch_factor: int = Field(
        default=2,
        ge=1,
        le=MAX_PREFETCH,
        description="micro-batches each worker process keeps ready (with num_workers > 0)",
    )
    pin_memory: bool = Field(
        default=False, description="page-lock the batches for the copy to a GPU"
    )
    persistent_workers: bool = Field(
        default=False,
        description="keep the worker processes between epochs (with num_workers > 0)",
    )
    cache_mb: int = Field(
        default=0,
        ge=0,
        le=MAX_CACHE_MB,
        description="MiB of RAM that keep decoded samples (0: no cache)",
    )

    @model_validator(mode="after")
    def _needs_workers(self) -> Self:
        if self.num_workers == 0 and self.persistent_workers:
            raise ValueError("persistent_workers needs num_workers > 0 (there are no workers)")
        if self.num_workers == 0 and self.prefetch_factor != 2:
            raise ValueError("prefetch_factor applies to worker processes: set num_workers > 0")
        return self

    def settings(self) -> LoaderSettings:
        """The worker's value of these settings."""
        return LoaderSettings(**self.model_dump())

    def token(self) -> str:
        """The settings as the tuner's one-token form (``LoaderSettings.token``)."""
        return self.settings().token()
