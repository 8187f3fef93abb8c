"""A job's captured output: per rank, what its workload wrote to stdout and stderr.

Each rank of a job has one Redis stream, ``{ns}:logs:{id}:{rank}``, capped to about
:data:`LOG_MAXLEN` lines (``XADD MAXLEN ~``: Redis trims whole nodes, so a few more may stay),
and ``{ns}:logs:{id}`` is the set of ranks that wrote. The workers write through
:class:`~orchestrator.store.sink.LogSink` in batches (see ``workers.logs``: lines are cut at
1 KiB, so one rank keeps at most about 2 MiB of a job's output). The streams outlive the job;
:meth:`LogStore.delete` removes them. A line's time is its stream id (Redis server time).
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Literal, cast

from pydantic import BaseModel, ConfigDict

from orchestrator.store.keys import LOG_MAXLEN, KeyFamily

__all__ = ["LOG_MAXLEN", "LogEntry", "LogStore"]

"""Approximate number of lines kept per rank of a job (the most recent)."""

POLL_S = 0.5
"""How often :meth:`LogStore.follow` looks for the first rank of a job that has not written."""

Cursors = dict[int, str]
"""Per rank, the stream id of the last line read (``"0"``: none yet)."""


_XReadReply = builtins.list[tuple[str, builtins.list[tuple[str, dict[str, str]]]]]


class LogEntry(BaseModel):
    """One captured line.

    Attributes:
        id: its stream entry id (``{ms}-{n}``), ordered within its rank.
        rank: the rank that wrote it.
        stream: ``out`` (stdout) or ``err`` (stderr).
        ts: when it was stored, Redis server time in seconds.
        line: the text, without its newline.
    """

    model_config = ConfigDict(frozen=True)

    id: str
    rank: int
    stream: Literal["out", "err"]
    ts: float
    line: str


class LogStore(KeyFamily):
    """The captured output of a namespace's jobs, one capped stream per rank."""

    def append(self, job_id: str, rank: int, lines: Sequence[tuple[str, str]]) -> None:
        """Add a batch of ``(stream, text)`` lines of one rank, in one round trip."""
        if not lines:
            return
        key = self._keys.logs(job_id, rank)
        pipe = self._client.pipeline(transaction=False)
        pipe.sadd(self._keys.log_ranks(job_id), rank)
        for stream, text in lines:
            fields = {"s": stream, "l": text}
            pipe.xadd(key, fields, maxlen=LOG_MAXLEN, approximate=True)  # type: ignore[arg-type]
        pipe.execute()

    def ranks(self, job_id: str) -> builtins.list[int]:
        """The ranks of the job that wrote anything, in order."""
        members = cast(set[str], self._client.smembers(self._keys.log_ranks(job_id)))
        return sorted(int(r) for r in members)

    def tail(
        self, job_id: str, *, rank: int | None = None, count: int | None = None
    ) -> builtins.list[LogEntry]:
        """The last ``count`` lines of each rank (all that are kept when ``None``), in the
        order they were stored."""
        entries: builtins.list[LogEntry] = []
        pipe = self._client.pipeline(transaction=False)
        ranks = self._ranks(job_id, rank)
        for r in ranks:
            key = self._keys.logs(job_id, r)
            if count is None:
                pipe.xrange(key)
            else:
                pipe.xrevrange(key, count=count)
        for r, reply in zip(ranks, pipe.execute(), strict=True):
            found = cast(builtins.list[tuple[str, dict[str, str]]], reply)
            entries.extend(_entry(r, sid, fields) for sid, fields in found)
        return _ordered(entries)

    def after(
        self, job_id: str, cursors: Cursors, *, rank: int | None = None, block_ms: int = 0
    ) -> builtins.list[LogEntry]:
        """Lines stored after ``cursors`` (updated in place), waiting up to ``block_ms`` for
        one when there are none (``0``: do not wait). A rank that starts writing later (a
        resized job) is read from its first line."""
        for r in self._ranks(job_id, rank):
            cursors.setdefault(r, "0")
        if not cursors:
            return []
        streams = {self._keys.logs(job_id, r): sid for r, sid in cursors.items()}
        by_key = {self._keys.logs(job_id, r): r for r in cursors}
        reply = self._client.xread(streams, block=block_ms or None)  # type: ignore[arg-type]
        entries: builtins.list[LogEntry] = []
        for key, found in cast(_XReadReply, reply or []):
            r = by_key[key]
            entries.extend(_entry(r, sid, fields) for sid, fields in found)
            if found:
                cursors[r] = found[-1][0]
        return _ordered(entries)

    def follow(
        self,
        job_id: str,
        ended: Callable[[], bool],
        *,
        rank: int | None = None,
        tail: int | None = None,
        block_ms: int = 2000,
    ) -> Iterator[builtins.list[LogEntry]]:
        """The lines kept (:meth:`tail`) as a first batch, then batches of new lines until
        ``ended()`` and the last lines are read. An empty batch means none came for
        ``block_ms`` (a job with no rank yet to wait on is looked at every :data:`POLL_S`);
        keep it under the client's socket timeout (redis-py's default is 5 s).

        A worker sends its last lines before its run returns, so once the job's state is
        terminal one more read drains them.
        """
        kept = self.tail(job_id, rank=rank, count=tail)
        cursors: Cursors = {e.rank: e.id for e in kept}  # oldest first: the last id wins
        yield kept
        waited = 0.0
        while True:
            done = ended()
            batch = self.after(job_id, cursors, rank=rank, block_ms=0 if done else block_ms)
            if done and not batch:
                return
            if batch or cursors:
                waited = 0.0
                yield batch
                continue
            time.sleep(POLL_S)  # nothing to block on yet
            waited += POLL_S
            if waited * 1000 >= block_ms:
                waited = 0.0
                yield batch

    def delete(self, job_id: str) -> int:
        """Remove the job's captured output; returns how many keys went."""
        keys = [self._keys.logs(job_id, r) for r in self.ranks(job_id)]
        return int(self._client.unlink(self._keys.log_ranks(job_id), *keys))

    def _ranks(self, job_id: str, rank: int | None) -> builtins.list[int]:
        return [rank] if rank is not None else self.ranks(job_id)


def _entry(rank: int, sid: str, fields: dict[str, str]) -> LogEntry:
    stream: Literal["out", "err"] = "err" if fields.get("s") == "err" else "out"
    ts = int(sid.split("-", 1)[0]) / 1000
    return LogEntry(id=sid, rank=rank, stream=stream, ts=ts, line=fields.get("l", ""))


def _ordered(entries: Iterable[LogEntry]) -> builtins.list[LogEntry]:
    """Oldest first across ranks (stream ids are server time, in milliseconds); lines of
    several ranks within one millisecond come by rank."""

    def key(e: LogEntry) -> tuple[int, int, int]:
        ms, _, seq = e.id.partition("-")
        return int(ms), e.rank, int(seq or 0)

    return sorted(entries, key=key)
