"""Command jobs' working directories: ``{ns}:workdir:{digest}``, one zip per content digest.

``orch submit --working-dir`` stores the zip (:meth:`WorkingDirStore.put`) before it submits
the jobs that name it; submission refuses a job naming a digest that is not stored; the runtime
reads it back (:meth:`WorkingDirStore.get`) when it launches such a job. Content-addressed, so
resubmitting the same folder writes nothing new. Stored as base64 text: the store's client
decodes replies as UTF-8.

A working directory is kept while any job the store still holds names it (a job can be requeued
and resumed at any time), and for :data:`GRACE_S` after it was last stored (the upload comes
before the submission that names it). ``orch gc`` then removes it
(:meth:`WorkingDirStore.sweep`), after the jobs it clears: a directory goes with the last of its
jobs. The sweep reads every held job's spec and deletes under ``WATCH`` of the jobs index, so a
job submitted while it reads makes it read again rather than lose its directory.
"""

from __future__ import annotations

import base64
import builtins
import hashlib
import json
from typing import cast

import redis

from orchestrator.store.keys import KeyFamily

__all__ = ["GRACE_S", "WorkingDirStore"]

GRACE_S = 3600.0
"""How long a stored working directory no job names is kept: ``orch submit`` stores it just
before the submission that names it, so an hour covers the slowest client."""

_BATCH = 500
_TRIES = 5


class WorkingDirStore(KeyFamily):
    """The packed working directories of one namespace."""

    def put(self, data: bytes) -> str:
        """Store a packed working directory (a zip); return its digest ``sha256:<hex>``.
        Storing it again (the same folder submitted again) restarts its grace period."""
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        seconds, micros = self._client.time()
        pipe = self._client.pipeline(transaction=True)
        pipe.set(self._keys.working_dir(digest), base64.b64encode(data).decode(), nx=True)
        pipe.zadd(self._keys.working_dirs, {digest: seconds + micros / 1e6})
        pipe.execute()
        return digest

    def exists(self, digest: str) -> bool:
        """Whether the working directory ``digest`` is stored."""
        return bool(self._client.exists(self._keys.working_dir(digest)))

    def get(self, digest: str) -> bytes | None:
        """The zip stored under ``digest``; ``None`` when there is none."""
        raw = cast(str | None, self._client.get(self._keys.working_dir(digest)))
        return base64.b64decode(raw) if raw is not None else None

    def sweep(self, *, dry_run: bool = False, grace_s: float = GRACE_S) -> builtins.list[str]:
        """Remove the working directories no held job names, stored more than ``grace_s`` ago.

        Returns:
            Their digests (on a dry run, those that would go).
        """
        for _ in range(_TRIES):
            with self._client.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(self._keys.jobs)  # a submission adds to it: then read again
                    unused = self._unused(grace_s)
                    if dry_run or not unused:
                        return unused
                    pipe.multi()
                    pipe.unlink(*(self._keys.working_dir(d) for d in unused))
                    pipe.zrem(self._keys.working_dirs, *unused)
                    pipe.execute()
                    return unused
                except redis.WatchError:
                    continue
        return []  # submissions kept coming: nothing removed, the next sweep tries again

    def _unused(self, grace_s: float) -> builtins.list[str]:
        seconds, micros = self._client.time()
        old = cast(
            builtins.list[str],
            self._client.zrangebyscore(
                self._keys.working_dirs, "-inf", seconds + micros / 1e6 - grace_s
            ),
        )
        if not old:
            return []
        named = self._named()
        return [d for d in old if d not in named]

    def _named(self) -> set[str]:
        """The working directories the held jobs name."""
        ids = cast(builtins.list[str], self._client.zrange(self._keys.jobs, 0, -1))
        named: set[str] = set()
        for start in range(0, len(ids), _BATCH):
            pipe = self._client.pipeline(transaction=False)
            for job_id in ids[start : start + _BATCH]:
                pipe.hget(self._keys.job(job_id), "spec")
            for raw in pipe.execute():
                if raw and '"working_dir":"sha256:' in raw:  # only command jobs are parsed
                    digest = json.loads(raw).get("workload", {}).get("working_dir")
                    if digest:
                        named.add(digest)
        return named
