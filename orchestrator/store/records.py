"""What the store hands back: a job record read from its Redis hash."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from orchestrator.spec import JobSpec
from orchestrator.store.history import read_history
from orchestrator.store.states import TERMINAL, JobState
from policies.history import JobHistory

__all__ = ["CORE_FIELDS", "JobRecord"]

CORE_FIELDS: frozenset[str] = frozenset(
    {
        "id",
        "name",
        "team",
        "class",
        "state",
        "spec",
        "seq",
        "gpus",
        "gpus_min",
        "gpus_max",
        "deadline_s",
        "wait_target_s",
        "gpu_memory_gb",
        "gpu_kinds",
        "exclude_gpu_kinds",
        "latency_ceiling",
        "submitted_at",
        "updated_at",
        "message",
        "attempts",
        "by",
    }
)
"""Fields the store itself writes; ``transition(fields=...)`` may not overwrite them."""

# Extra fields holding JSON objects, decoded into attributes of their own.
_JSON_FIELDS = ("placement", "result")


@dataclass(frozen=True)
class JobRecord:
    """One job as stored: identity, state, the spec it was submitted with, and what happened.

    Attributes:
        id: unique job id (``{name}-{6 hex digits}``).
        name, team, job_class: from the spec.
        state: the current state.
        spec_data: the submitted spec as JSON data; :attr:`spec` parses it on first use.
        seq: submit sequence number (order of submission within the namespace).
        gpus: GPUs the spec asks for when placed.
        submitted_at, updated_at: Redis server time, seconds since the epoch.
        message: why the last transition happened (may be empty).
        attempts: how many times the job was started (see ``JobStore.incr_attempts``).
        by: who submitted it, if known.
        placement: where it runs (JSON object set by the scheduler), if placed.
        result: the outcome (JSON object set when it ends), if any.
        fields: every other field, as stored (e.g. ``started_at``, ``finished_at``).
    """

    id: str
    name: str
    team: str
    job_class: str
    state: JobState
    spec_data: dict[str, Any]
    seq: int
    gpus: int
    submitted_at: float
    updated_at: float
    message: str = ""
    attempts: int = 0
    by: str | None = None
    placement: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    fields: dict[str, str] = field(default_factory=dict)

    @cached_property
    def spec(self) -> JobSpec:
        """The submitted :class:`JobSpec` (validated on first access)."""
        return JobSpec.model_validate(self.spec_data)

    @property
    def history(self) -> JobHistory:
        """What the job's ended runs left (``orchestrator.store.history``)."""
        return read_history(self.fields)

    @property
    def terminal(self) -> bool:
        """Whether the job is done (finished, failed or cancelled)."""
        return self.state in TERMINAL

    @classmethod
    def from_hash(cls, h: Mapping[str, str]) -> JobRecord:
        """Build a record from the fields of a job hash (as ``HGETALL`` returns them)."""
        decoded = {k: _json_object(h.get(k)) for k in _JSON_FIELDS}
        rest = {k: v for k, v in h.items() if k not in CORE_FIELDS and k not in _JSON_FIELDS}
        return cls(
            id=h["id"],
            name=h["name"],
            team=h["team"],
            job_class=h["class"],
            state=JobState(h["state"]),
            spec_data=json.loads(h["spec"]),
            seq=int(h["seq"]),
            gpus=int(h["gpus"]),
            submitted_at=float(h["submitted_at"]),
            updated_at=float(h["updated_at"]),
            message=h.get("message", ""),
            attempts=int(h.get("attempts", "0")),
            by=h.get("by") or None,
            placement=decoded["placement"],
            result=decoded["result"],
            fields=rest,
        )


def _json_object(raw: str | None) -> dict[str, Any] | None:
    # Empty means "cleared" (e.g. placement reset when a job goes back to the queue).
    if not raw:
        return None
    value = json.loads(raw)
    return value if isinstance(value, dict) else {"value": value}
