"""The tuning cache: a repeated job skips tuning, a similar one warm-starts.

Key: a fingerprint (SHA-256) of what the measurements depend on -- the workload (a command
job's working directory digest with it) and its arguments, the device (GPU model, or CPU, and
GPUs per node) and the software versions (Python, torch). Neither the SLA nor the search space
is in the key: a trial's config says everything else it measured (batch split, GPUs, plan,
precision, loader, a script's settings), so an entry holds every measured trial, a new SLA
re-judges them and other bounds take the trials within them (``SearchSpace.contains``). A job
with the same fingerprint finds its optimum among them and runs no trial ("cache hit"), or goes
on from them ("warm"). A job with the same workload and device but other arguments is
*similar*: its nearest entries' best configs are tried first (``study.enqueue_trial``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import platform
import time
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any

from orchestrator.tuner.objective import Goal, Measurement
from orchestrator.tuner.space import Config, DeviceCaps, SearchSpace

if TYPE_CHECKING:
    from orchestrator.store.tuning import TuneCacheStore

__all__ = ["CacheEntry", "TuneCache", "describe", "fingerprint"]


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "-"


def describe(workload: str, args: dict[str, Any], caps: DeviceCaps) -> dict[str, Any]:
    """What the measurements depend on, as JSON data (hashed by :func:`fingerprint`): not the
    goal, nor the bounds (see the module doc)."""
    return {
        "workload": workload,
        "args": args,
        "device": {"kind": caps.kind, "name": caps.name, "gpus_per_node": caps.gpus_per_node},
        "versions": {"python": platform.python_version(), "torch": _version("torch")},
    }


def fingerprint(descriptor: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a descriptor."""
    text = json.dumps(descriptor, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class CacheEntry:
    """One cached tuning: its descriptor and every measured trial."""

    fingerprint: str
    descriptor: dict[str, Any]
    trials: list[tuple[Config, Measurement]]
    updated_at: float

    def within(self, space: SearchSpace) -> list[tuple[Config, Measurement]]:
        """The trials whose configs ``space`` holds (another job's bounds may be narrower),
        its loader apart: the loader stage measures loaders beyond the space's own
        (``tuner.loader_stage``)."""
        own = space.loaders[0]
        return [
            (c, m)
            for c, m in self.trials
            if space.contains(c) or space.contains(dataclasses.replace(c, loader=own))
        ]

    def best(self, goal: Goal, n: int = 1) -> list[Config]:
        """The ``n`` best feasible configs under ``goal`` (closest ones when none is)."""
        judged = [(goal.judge(c, m), c) for c, m in self.trials if m.ok]
        judged.sort(
            key=lambda vc: (
                not vc[0].feasible,
                vc[0].violation,
                vc[0].value if goal.direction == "minimize" else -vc[0].value,
            )
        )
        return [c for _, c in judged[:n]]


class TuneCache:
    """The tuning cache of one namespace: entries by fingerprint, found again by fingerprint or
    by similarity group (``workload|device kind|device name``).

    Args:
        store: where the entries are kept (``JobStore.tune_cache``).
    """

    def __init__(self, store: TuneCacheStore) -> None:
        self.store = store

    def get(self, fp: str) -> CacheEntry | None:
        """The entry of a fingerprint, if cached."""
        data = self.store.get(fp)
        if data is None:
            return None
        trials = [
            (Config.from_dict(t["config"]), Measurement.from_dict(t["measurement"]))
            for t in data["trials"]
        ]
        return CacheEntry(fp, data["descriptor"], trials, float(data["updated_at"]))

    def put(
        self, descriptor: dict[str, Any], trials: list[tuple[Config, Measurement]]
    ) -> CacheEntry:
        """Store (merge into) the entry of ``descriptor``; newer measurements of a config win."""
        fp = fingerprint(descriptor)
        old = self.get(fp)
        merged = {c: m for c, m in (old.trials if old else [])}
        merged.update(dict(trials))
        entry = CacheEntry(fp, descriptor, list(merged.items()), time.time())
        payload = {
            "descriptor": descriptor,
            "trials": [
                {"config": c.to_dict(), "measurement": m.to_dict()} for c, m in merged.items()
            ],
            "updated_at": entry.updated_at,
        }
        self.store.put(fp, payload, _similar_key(descriptor))
        return entry

    def similar(self, descriptor: dict[str, Any], limit: int = 3) -> list[CacheEntry]:
        """Entries of the same workload on the same device, nearest arguments first."""
        fp_self = fingerprint(descriptor)
        found = []
        for fp in self.store.fingerprints(_similar_key(descriptor)):
            if fp != fp_self:
                entry = self.get(fp)
                if entry is not None:
                    found.append(entry)
        found.sort(key=lambda e: _distance(e.descriptor, descriptor))
        return found[:limit]


def _similar_key(descriptor: dict[str, Any]) -> str:
    dev = descriptor["device"]
    return f"{descriptor['workload']}|{dev['kind']}|{dev['name']}"


def _distance(a: dict[str, Any], b: dict[str, Any]) -> float:
    """How far two descriptors' arguments are: log-ratio for numbers, 1 for other changes."""
    import math

    keys = set(a["args"]) | set(b["args"])
    d = 0.0
    for k in keys:
        x, y = a["args"].get(k), b["args"].get(k)
        if isinstance(x, int | float) and isinstance(y, int | float) and x > 0 and y > 0:
            d += abs(math.log(x / y))
        elif x != y:
            d += 1.0
    return d + (0.5 if a.get("versions") != b.get("versions") else 0.0)
