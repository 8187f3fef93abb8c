"""Orchestrator settings, read once from the environment.

Embedded by default, real at scale: with no ``REDIS_URL`` the orchestrator runs its own Redis
server under the data directory; with no ``RAY_ADDRESS`` it starts a local Ray instance.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator.errors import ConfigError

ENV_VARS = {
    "redis_url": "REDIS_URL",
    "ray_address": "RAY_ADDRESS",
    "data_dir": "ORCH_DATA_DIR",
    "namespace": "ORCH_NAMESPACE",
    "virtual_gpus": "ORCH_VIRTUAL_GPUS",
    "scheduler_interval_s": "ORCH_SCHEDULER_INTERVAL_S",
    "policy": "ORCH_POLICY",
    "stop_grace_s": "ORCH_STOP_GRACE_S",
}


class Settings(BaseModel):
    """Where state lives and which Ray pool to use.

    Attributes:
        redis_url: an existing Redis server; ``None`` starts the embedded one.
        ray_address: an existing Ray cluster; ``None`` starts a local Ray instance.
        data_dir: embedded Redis data (append-only file), checkpoints, logs.
        namespace: prefix of every Redis key, so several orchestrators share one Redis.
        virtual_gpus: GPU slots backed by the CPU when the local Ray has no CUDA GPU.
        scheduler_interval_s: how often the scheduler takes a snapshot and decides.
        policy: the scheduling policy's registered name (``gang``, ``shared``, ...).
        stop_grace_s: how long a job being stopped (cancel, preemption) may take to write its
            checkpoint before it is killed: the longest an interactive job waits for it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    redis_url: str | None = None
    ray_address: str | None = None
    data_dir: Path = Path(".orch-data")
    namespace: str = Field(default="orch", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    virtual_gpus: int = Field(default=4, ge=1, le=1024)
    scheduler_interval_s: float = Field(default=0.5, gt=0, le=60)
    policy: str = Field(default="shared", min_length=1)
    stop_grace_s: float = Field(default=30.0, gt=0, le=3600)

    @classmethod
    def from_env(cls, **overrides: object) -> Settings:
        """Build settings from ``ENV_VARS`` (empty variables count as unset), then overrides.

        Raises:
            ConfigError: a variable has a value that is not allowed, naming the variable.
        """
        values: dict[str, object] = {}
        for field, var in ENV_VARS.items():
            raw = os.environ.get(var, "").strip()
            if raw:
                values[field] = raw
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls.model_validate(values)
        except ValidationError as err:
            problems = []
            for e in err.errors():
                field = str(e["loc"][0]) if e["loc"] else "?"
                name = ENV_VARS.get(field, field)
                problems.append(f"{name}: {e['msg']}, got {e.get('input')!r}")
            raise ConfigError("invalid settings: " + "; ".join(problems)) from None

    @property
    def checkpoint_dir(self) -> Path:
        """Root of job checkpoints (one folder per job)."""
        return self.data_dir.resolve() / "checkpoints" / self.namespace
