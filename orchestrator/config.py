"""Orchestrator settings, read once from the environment.

Embedded by default, real at scale: with no ``REDIS_URL`` the orchestrator runs its own Redis
server under the data directory; with no ``RAY_ADDRESS`` it starts a local Ray instance.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from orchestrator.errors import ConfigError
from orchestrator.names import ruled
from orchestrator.storage import StorageLocation

ENV_VARS = {
    "redis_url": "REDIS_URL",
    "ray_address": "RAY_ADDRESS",
    "data_dir": "ORCH_DATA_DIR",
    "namespace": "ORCH_NAMESPACE",
    "virtual_gpus": "ORCH_VIRTUAL_GPUS",
    "virtual_gpu_memory_gb": "ORCH_VIRTUAL_GPU_MEMORY_GB",
    "scheduler_interval_s": "ORCH_SCHEDULER_INTERVAL_S",
    "policy": "ORCH_POLICY",
    "stop_grace_s": "ORCH_STOP_GRACE_S",
    "api_address": "ORCH_API_ADDRESS",
    "retention_s": "ORCH_RETENTION",
    "standby": "ORCH_STANDBY",
    "lease_ttl_ms": "ORCH_LEASE_TTL_MS",
    "redis_bind": "ORCH_REDIS_BIND",
    "checkpoint_uri": "ORCH_CHECKPOINT_URI",
    "guard_hold_s": "ORCH_GUARD_HOLD_S",
    "guard_max_retunes": "ORCH_GUARD_MAX_RETUNES",
    "warm_workers": "ORCH_WARM_WORKERS",
    "api_max_body": "ORCH_API_MAX_BODY",
    "api_max_batch_body": "ORCH_API_MAX_BATCH_BODY",
    "api_body_timeout_s": "ORCH_API_BODY_TIMEOUT",
}

DEFAULT_RETENTION_S = 30 * 86400.0
"""How long a finished job's record, events, metrics, logs and study are kept (30 days)."""

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw]?)")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


_SIZE = re.compile(r"(\d+)\s*([kmg]?)(?:i?b)?")
_UNIT_BYTES = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_size(text: str) -> int:
    """Bytes in ``text``: a whole number with an optional binary unit K, M or G (``1M`` and
    ``1MiB`` are 1,048,576 bytes; ``512k``, ``65536``).

    Raises:
        ValueError: not a size (the message says what is allowed).
    """
    match = _SIZE.fullmatch(text.strip().lower())
    if match is None:
        raise ValueError("expected a size such as 1M, 512K, 1GiB or 65536 (bytes)")
    return int(match[1]) * _UNIT_BYTES[match[2]]


def parse_duration(text: str) -> float:
    """Seconds in ``text``: a number with an optional unit s, m, h, d or w (``30d``, ``12h``).

    Raises:
        ValueError: not a duration (the message says what is allowed).
    """
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None:
        raise ValueError("expected a duration such as 30d, 12h, 90m or 3600 (seconds)")
    return float(match[1]) * _UNIT_S[match[2]]


def parse_since(text: str, now: float) -> float:
    """The moment (epoch seconds) ``text`` names: a duration back from ``now`` (``30d``,
    :func:`parse_duration`) or an ISO-8601 date or time, in UTC unless it gives an offset
    (``2026-11-28``, ``2026-11-28T10:00``, ``2026-11-28T10:00:00Z``).

    Raises:
        ValueError: neither (the message names both forms).
    """
    try:
        return now - parse_duration(text)
    except ValueError:
        pass
    try:
        moment = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            "must be a duration back from now (30d, 12h, 90m, 3600 seconds) or an ISO date or"
            " time, UTC unless an offset is given (2026-11-28, 2026-11-28T10:00,"
            " 2026-11-28T10:00Z)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.timestamp()


def format_duration(seconds: float) -> str:
    """``seconds`` as people write it, in the largest unit of :func:`parse_duration` that
    keeps it whole when one does (``30d``, ``12h``, ``90m``), else in seconds (``3.5s``)."""
    for unit in ("w", "d", "h", "m"):
        n = seconds / _UNIT_S[unit]
        if n >= 1 and n == int(n):
            return f"{int(n)}{unit}"
    return f"{seconds:g}s"


class Settings(BaseModel):
    """Where state lives and which Ray pool to use.

    Attributes:
        redis_url: an existing Redis server (``redis://:pw@host:6379/0``); ``None`` starts the
            embedded one.
        ray_address: an existing Ray cluster (``HOST:6379`` from a machine of the cluster, or
            ``ray://HOST:10001`` through Ray Client); ``None`` starts a local Ray instance.
        data_dir: embedded Redis data (append-only file), checkpoints (unless
            ``checkpoint_uri`` says otherwise), logs.
        namespace: prefix of every Redis key, so several orchestrators share one Redis
            (``orch demo`` uses ``demo``).
        virtual_gpus: GPU slots backed by the CPU when the local Ray has no CUDA GPU.
        virtual_gpu_memory_gb: the memory each virtual GPU slot declares (GB), which placement
            checks against a job's ``resources.gpu_memory_gb`` as it does a real GPU's; a
            node of a joined cluster may declare its own with the Ray resource
            ``orch_gpu_memory_gb`` (see ``orchestrator.pool``), and real GPUs report theirs
            through NVML. Large by default, so a job written for a big GPU still runs on a CPU
            machine.
        scheduler_interval_s: how often the scheduler takes a snapshot and decides.
        policy: the scheduling policy's registered name: ``shared`` (preemption, teams,
            elastic), ``shared-genetic`` (``shared`` with Pollux's genetic search for bulk
            GPUs), ``gang``, ``tiresias``, ``pollux``, ``strict-priority``,
            ``static-partition`` (also ``orch up --policy``).
        stop_grace_s: how long a job being stopped (cancel, preemption) may take to write its
            checkpoint before it is killed: the longest an interactive job waits for it.
        api_address: ``host:port`` the API server (``orch up``, ``orch serve``) listens on;
            loopback by default, so only this machine reaches it until an admin says otherwise
            (also ``--api-address``).
        retention_s: how long a finished (or failed, cancelled) job is kept: its keys expire
            that long after it ended, and ``orch gc`` removes what is left of it (``30d``,
            ``12h`` or seconds in ``ORCH_RETENTION``).
        standby: when another scheduler drives the namespace, wait as its standby and take
            over when its lease lapses (``orch up --standby``; two replicas on a cluster),
            instead of refusing to start.
        lease_ttl_ms: how long the scheduler lease lives without renewal: a standby takes
            over within about 1.3 times this after the active scheduler dies.
        redis_bind: the address the embedded Redis listens on besides loopback, and the one
            in the URL workers get: this host's address on the network for workers on other
            hosts (always with its password); ignored with ``REDIS_URL``.
        warm_workers: worker actors kept started per node (torch and the harness imported, a
            first step done), handed to 1-GPU jobs so they start without a new process (in
            tens of milliseconds); each holds one of the node's free GPUs until a job takes it or a
            gang needs it, and on a node whose GPUs are all busy it holds none and takes the
            GPU of the job handed it (an interactive job that preempts starts warm too). 0
            turns the pool off.
        checkpoint_uri: where job checkpoints go: a path shared by every worker host, or an
            fsspec URL (``s3://bucket/prefix``, with ``s3fs`` installed and the usual AWS
            variables on every host); by default ``data_dir/checkpoints``. Each namespace gets
            a folder in it, and each job one in that (see :attr:`checkpoint_dir`).

        guard_hold_s: how long a running job's measured figure must stay out of its SLA (or
            back inside) before the SLA guard says so and acts (see
            :mod:`orchestrator.control.guard`).
        guard_max_retunes: re-tunes the SLA guard may give one job (0: it never re-tunes);
            those its team asks for (``orch retune``) are not counted.
        api_max_body: the largest request body the API reads (bytes; ``1M``, ``512K``), but for
            a batch of jobs: a larger one is refused with 413 before it is read, so a client
            cannot make the server hold an upload of any size (one job is under 70 KiB).
        api_max_batch_body: the largest body of ``POST /v1/jobs/batch`` (up to 10,000 jobs).
        api_body_timeout_s: the longest the API waits for a request's whole body once its
            headers are in (``30s``, ``2m`` or seconds in ``ORCH_API_BODY_TIMEOUT``): a body
            not in by then is answered 408 and its connection closed, so clients that send a
            byte now and then cannot hold the server's connections open.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    redis_url: str | None = None
    ray_address: str | None = None
    data_dir: Path = Path(".orch-data")
    namespace: str = Field(
        default="orch",
        pattern=ruled(r"^[A-Za-z0-9_.-]{1,64}$", "must be 1-64 letters, digits, '.', '_' or '-'"),
    )
    virtual_gpus: int = Field(default=4, ge=1, le=1024)
    virtual_gpu_memory_gb: float = Field(default=80.0, gt=0, le=1 << 20)
    scheduler_interval_s: float = Field(default=0.5, gt=0, le=60)
    policy: str = Field(default="shared", min_length=1)
    stop_grace_s: float = Field(default=30.0, gt=0, le=3600)
    api_address: str = Field(
        default="127.0.0.1:8321",
        pattern=ruled(
            r"^(\[[0-9A-Fa-f:.]+\]|[\w.-]+):\d{1,5}$",
            "must be HOST:PORT (a name, an IPv4 address or a bracketed IPv6 one)",
        ),
    )
    retention_s: float = Field(default=DEFAULT_RETENTION_S, gt=0)
    standby: bool = False
    lease_ttl_ms: int = Field(default=15_000, ge=1_000, le=600_000)
    guard_hold_s: float = Field(default=10.0, gt=0, le=3600)
    guard_max_retunes: int = Field(default=1, ge=0, le=10)
    redis_bind: str = "127.0.0.1"
    warm_workers: int = Field(default=1, ge=0, le=64)
    checkpoint_uri: str | None = Field(default=None, min_length=1)
    api_max_body: int = Field(default=1 << 20, ge=1 << 10, le=1 << 30)
    api_max_batch_body: int = Field(default=32 << 20, ge=1 << 10, le=1 << 30)
    api_body_timeout_s: float = Field(default=30.0, gt=0, le=3600)

    @field_validator("checkpoint_uri")
    @classmethod
    def _storage(cls, value: str | None) -> str | None:
        if value is not None and "://" in value:
            scheme = value.split("://", 1)[0]
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme):
                raise ValueError("expected a path or a URL such as s3://bucket/prefix")
        return value

    @field_validator("redis_bind")
    @classmethod
    def _one_address(cls, value: str) -> str:
        try:
            address = ipaddress.ip_address(value)
        except ValueError:
            raise ValueError("expected one IP address of this host, such as 10.0.0.5") from None
        if address.is_unspecified:
            # The URL workers get names this address: it must be one they can reach.
            raise ValueError("expected this host's own address, not a wildcard")
        return str(address)

    @field_validator("api_max_body", "api_max_batch_body", mode="before")
    @classmethod
    def _size(cls, value: object) -> object:
        return parse_size(value) if isinstance(value, str) else value

    @field_validator("retention_s", "api_body_timeout_s", mode="before")
    @classmethod
    def _duration(cls, value: object) -> object:
        return parse_duration(value) if isinstance(value, str) else value

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
    def checkpoint_dir(self) -> StorageLocation:
        """Root of this namespace's job checkpoints (one folder per job)."""
        if self.checkpoint_uri is None:
            return StorageLocation(str(self.data_dir.resolve() / "checkpoints" / self.namespace))
        root = StorageLocation(self.checkpoint_uri)
        if not root.is_url:
            root = StorageLocation(str(Path(self.checkpoint_uri).expanduser().resolve()))
        return root / self.namespace
