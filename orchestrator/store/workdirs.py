"""Command jobs' working directories: ``{ns}:workdir:{digest}``, one zip per content digest.

``orch submit --working-dir`` stores the zip (:meth:`WorkingDirStore.put`) before it submits
the jobs that name it; submission refuses a job naming a digest that is not stored; the runtime
reads it back (:meth:`WorkingDirStore.get`) when it launches such a job. Content-addressed, so
resubmitting the same folder writes nothing new; kept until the namespace is deleted (a job can
be requeued and resumed at any time). Stored as base64 text: the store's client decodes replies
as UTF-8.
"""

from __future__ import annotations

import base64
import hashlib
from typing import cast

from orchestrator.store.keys import KeyFamily

__all__ = ["WorkingDirStore"]


class WorkingDirStore(KeyFamily):
    """The packed working directories of one namespace."""

    def put(self, data: bytes) -> str:
        """Store a packed working directory (a zip); return its digest ``sha256:<hex>``."""
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        self._client.set(self._keys.working_dir(digest), base64.b64encode(data).decode(), nx=True)
        return digest

    def exists(self, digest: str) -> bool:
        """Whether the working directory ``digest`` is stored."""
        return bool(self._client.exists(self._keys.working_dir(digest)))

    def get(self, digest: str) -> bytes | None:
        """The zip stored under ``digest``; ``None`` when there is none."""
        raw = cast(str | None, self._client.get(self._keys.working_dir(digest)))
        return base64.b64decode(raw) if raw is not None else None
