"""The pool view: what the scheduler last saw of the pool, for ``orch pool`` and the CLI.

``{ns}:pool`` is one JSON document (nodes, GPUs used, jobs, team usage) that the scheduler
republishes with a time-to-live of its lease: when no scheduler runs, it is gone, and its
absence is how the CLI tells that no scheduler is up.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from orchestrator.store.keys import KeyFamily

__all__ = ["PoolViewStore"]


class PoolViewStore(KeyFamily):
    """The published pool view of one namespace."""

    def publish(self, view: Mapping[str, Any], ttl_ms: int) -> None:
        """Replace the view; it expires after ``ttl_ms`` unless published again."""
        self._client.set(self._keys.pool_view, json.dumps(view), px=ttl_ms)

    def read(self) -> dict[str, Any] | None:
        """The view last published, or ``None`` when none is live (no scheduler runs)."""
        raw = cast(str | None, self._client.get(self._keys.pool_view))
        return json.loads(raw) if raw else None
