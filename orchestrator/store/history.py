"""A job's history (:class:`~policies.history.JobHistory`) as the job's hash stores it.

The one place that reads and writes the record: the snapshot's facts, the loop's writes when
a run ends, the SLA guard's re-tune bound, usage accounting and telemetry all go through
:func:`read_history` and :func:`history_fields`. The stored names are those the job hashes
have always had (``attained_gpu_s``, ``remaining_s``...), so a store written by an earlier
version reads the same and nothing is migrated; ``STORED`` maps the record's names to them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policies.history import JobHistory

__all__ = ["STORED", "history_fields", "read_history"]

STORED: dict[str, str] = {
    "attained_service": "attained_gpu_s",
    "remaining_work": "remaining_s",
    "preempted_at": "preempted_at",
    "restarts": "restarts",
    "most_gpus": "most_gpus",
    "retunes": "retunes",
    "losses": "losses",
}
"""The hash field of each of the record's fields."""

_INTS = frozenset({"restarts", "most_gpus", "retunes", "losses"})


def read_history(raw: Mapping[str, Any]) -> JobHistory:
    """The history a job's stored fields hold (a field never written: the record's default;
    an unreadable one, which only a hand edit can make, reads as the default too)."""
    values: dict[str, Any] = {}
    for name, key in STORED.items():
        v = raw.get(key)
        if v is None or v == "":
            continue
        try:
            values[name] = int(float(v)) if name in _INTS else float(v)
        except (TypeError, ValueError):
            continue
    return JobHistory(**values)


def history_fields(new: JobHistory, before: JobHistory | None = None) -> dict[str, Any]:
    """The hash fields to write for ``new``: those that differ from ``before`` (all of them
    without it), ``None`` written as ``""``."""
    out: dict[str, Any] = {}
    for name, key in STORED.items():
        v = getattr(new, name)
        if before is not None and getattr(before, name) == v:
            continue
        out[key] = "" if v is None else v
    return out
