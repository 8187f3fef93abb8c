"""Retention: a finished job's state goes away a set time after it ended, so Redis stays bounded.

Two halves (Redis is run with ``noeviction``: nothing else ever frees memory):

- **Expiry at the end.** When a job enters a terminal state (finished, failed, cancelled),
  :meth:`RetentionStore.expire` gives each of its own keys a time to live of the retention age
  (``Settings.retention_s``, 30 days by default): its record, event stream, latest metrics and
  metrics history, scaling curve, tuner profile and report, and captured output. Redis then
  drops them by itself, on time, whether or not anything else runs.
- **The sweep** (``orch gc``, :meth:`RetentionStore.sweep`) removes what cannot expire by
  itself: the job's entries in shared keys (the ``jobs`` index, its name's set), keys written
  after it ended (a last metrics report or log line that created its key late), and its Optuna
  study, which lives in the namespace's one journal. It also removes at once any ended job older
  than the age it is given (jobs that ended before retention existed, or a shorter age asked
  for by ``orch gc --older-than``). A job that has not ended is never touched.
- **Checkpoints.** The sweep deletes the checkpoint folder of every job it clears (given the
  checkpoint root: a path or an fsspec URL, see :class:`orchestrator.storage.StorageLocation`),
  step directories and record alike. A folder it cannot delete (storage unreachable, no
  permission) keeps its job's keys too, so the next sweep tries again; nothing is orphaned.

The journal is one Redis key per Optuna operation, append-only, for every study of the
namespace. A study is deleted through Optuna (a reader no longer sees it and Optuna's next
snapshot leaves it out); the entries before Optuna's latest snapshot are then set to expire after
:data:`JOURNAL_GRACE_S`, not deleted at once, since a tuning session opened earlier may still
have to read them (it reads what it has not read yet when it next touches its study).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from orchestrator.store.keys import KeyFamily, Keys
from orchestrator.store.states import TERMINAL

if TYPE_CHECKING:
    import redis

    from orchestrator.storage import StorageLocation
    from orchestrator.store.logs import LogStore
    from orchestrator.store.tuning import StudyJournal
    from orchestrator.store.workdirs import WorkingDirStore

__all__ = ["JOURNAL_GRACE_S", "GcReport", "RetentionStore", "job_keys"]

JOURNAL_GRACE_S = 86400
"""How long journal entries a snapshot already holds are kept (for readers opened before it)."""

_BATCH = 500
_TERMINAL = frozenset(s.value for s in TERMINAL)

# The keys given (KEYS), plus the streams of every rank in the ranks set (the last key), all
# to expire in ARGV[1] seconds; a rank's stream key is ARGV[2] .. rank.
_EXPIRE_LUA = """
for _, key in ipairs(KEYS) do redis.call("EXPIRE", key, ARGV[1]) end
for _, rank in ipairs(redis.call("SMEMBERS", KEYS[#KEYS])) do
  redis.call("EXPIRE", ARGV[2] .. rank, ARGV[1])
end
return 1
"""


def job_keys(keys: Keys, job_id: str) -> list[str]:
    """A job's own keys, the ranks set of its captured output last (one rank's stream each
    besides: ``keys.logs(job_id, rank)``)."""
    return [
        keys.job(job_id),
        keys.events(job_id),
        keys.metrics(job_id),
        keys.metrics_stream(job_id),
        keys.scaling(job_id),
        keys.kinds(job_id),
        keys.profile(job_id),
        keys.tune_report(job_id),
        *(  # a service's endpoint (its windows expire on their own)
            keys.key("svc", job_id, part) for part in ("req", "ready", "life", "wins")
        ),
        keys.log_ranks(job_id),
    ]


def job_name(job_id: str) -> str:
    """The name a job was submitted under: its id is ``{name}-{6 hex digits}``."""
    return job_id.rsplit("-", 1)[0]


@dataclass
class GcReport:
    """What a sweep removed (or, on a dry run, would remove).

    Attributes:
        expired: jobs whose record had already expired; their leftovers were removed.
        removed: ended jobs older than the age asked for, removed now.
        kept: jobs left alone (not ended, or ended more recently).
        keys: keys deleted (0 on a dry run).
        studies: Optuna studies deleted.
        journal_aged: journal entries newly set to expire (held by Optuna's snapshot).
        checkpoints: checkpoint folders deleted.
        checkpoint_errors: ``job id: why`` for each checkpoint folder that could not be
            deleted (that job is kept, for the next sweep).
        working_dirs: digests of the command jobs' working directories removed: no job left
            names them (:meth:`WorkingDirStore.sweep`; on a dry run, those no job names now).
    """

    expired: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    kept: int = 0
    keys: int = 0
    studies: int = 0
    journal_aged: int = 0
    checkpoints: int = 0
    checkpoint_errors: list[str] = field(default_factory=list)
    working_dirs: list[str] = field(default_factory=list)

    @property
    def gone(self) -> list[str]:
        """Every job the sweep cleared, expired or removed."""
        return self.expired + self.removed


class RetentionStore(KeyFamily):
    """Expiry of ended jobs' keys, and the sweep of what is left (see the module docstring).

    Args:
        client: the store's Redis client (``decode_responses=True``).
        keys: the namespace's keys.
        logs: the captured output, whose :meth:`LogStore.delete` removes a job's streams.
    """

    def __init__(self, client: redis.Redis, keys: Keys, logs: LogStore) -> None:
        super().__init__(client, keys)
        self._logs = logs
        self._expire = client.register_script(_EXPIRE_LUA)

    def expire(self, job_id: str, ttl_s: float) -> None:
        """Give each of the job's keys ``ttl_s`` seconds to live (at least 1), in one step."""
        self._expire(
            keys=job_keys(self._keys, job_id),
            args=[max(1, round(ttl_s)), self._keys.logs_prefix(job_id)],
        )

    def sweep(
        self,
        older_than_s: float,
        *,
        dry_run: bool = False,
        journal: StudyJournal | None = None,
        study_name: Callable[[str], str] | None = None,
        checkpoints: StorageLocation | None = None,
        working_dirs: WorkingDirStore | None = None,
    ) -> GcReport:
        """Remove the leftovers of expired jobs and every ended job older than ``older_than_s``
        (since it ended, by the Redis clock), with their studies in ``journal`` (the study of
        job ``j`` is ``study_name(j)``). Jobs that have not ended are never touched.

        Args:
            older_than_s: the age, in seconds since the job's last state change, from which an
                ended job is removed.
            dry_run: only say what would be removed.
            journal: the namespace's Optuna journal (``None``: leave studies alone).
            study_name: the study of a job id (required with ``journal``).
            checkpoints: the namespace's checkpoint root (job ``j``'s folder is
                ``checkpoints / j``); ``None``: leave checkpoints alone.
            working_dirs: the namespace's working directories, swept after the jobs (those
                no job left names go); ``None``: leave them alone.
        """
        seconds, micros = self._client.time()
        cutoff = seconds + micros / 1e6 - older_than_s
        report = GcReport()
        ids = cast(builtins.list[str], self._client.zrange(self._keys.jobs, 0, -1))
        for start in range(0, len(ids), _BATCH):
            self._classify(ids[start : start + _BATCH], cutoff, report)
        if dry_run:
            if working_dirs is not None:
                report.working_dirs = working_dirs.sweep(dry_run=True)
            return report
        if checkpoints is not None:
            self._remove_checkpoints(checkpoints, report)
        gone = report.gone
        for start in range(0, len(gone), _BATCH):
            report.keys += self._delete(gone[start : start + _BATCH])
        if journal is not None and study_name is not None:
            report.studies = journal.delete_studies(study_name(j) for j in gone)
            report.journal_aged = self._age_journal(journal)
        if working_dirs is not None:
            report.working_dirs = working_dirs.sweep()
        return report

    def _classify(self, ids: builtins.list[str], cutoff: float, report: GcReport) -> None:
        pipe = self._client.pipeline(transaction=False)
        for job_id in ids:
            pipe.hmget(self._keys.job(job_id), ("state", "updated_at"))
        for job_id, (state, updated_at) in zip(ids, pipe.execute(), strict=True):
            if state is None:
                report.expired.append(job_id)
            elif state in _TERMINAL and float(updated_at or 0) <= cutoff:
                report.removed.append(job_id)
            else:
                report.kept += 1

    def _remove_checkpoints(self, root: StorageLocation, report: GcReport) -> None:
        """Delete the cleared jobs' checkpoint folders, before their keys: a job whose folder
        stays is taken off the report's lists (its keys stay), so no folder loses its job."""
        for ids in (report.expired, report.removed):
            for job_id in builtins.list(ids):
                try:
                    report.checkpoints += (root / job_id).remove()
                except Exception as err:  # any storage failure: fsspec backends raise their own
                    ids.remove(job_id)
                    report.kept += 1
                    report.checkpoint_errors.append(f"{job_id}: {type(err).__name__}: {err}")

    def _delete(self, ids: builtins.list[str]) -> int:
        """Delete the jobs' keys and index entries; returns how many keys went."""
        pipe = self._client.pipeline(transaction=False)
        for job_id in ids:
            pipe.exists(self._keys.log_ranks(job_id))
        with_logs = [j for j, n in zip(ids, pipe.execute(), strict=True) if n]
        deleted = sum(self._logs.delete(j) for j in with_logs)
        pipe = self._client.pipeline(transaction=False)
        for job_id in ids:
            pipe.unlink(*job_keys(self._keys, job_id)[:-1])
            pipe.srem(self._keys.names(job_name(job_id)), job_id)
        pipe.zrem(self._keys.jobs, *ids)
        replies = pipe.execute()
        return deleted + sum(int(n) for n in replies[0:-1:2])

    def _age_journal(self, journal: StudyJournal) -> int:
        """Set the journal entries Optuna's latest snapshot holds to expire (once each)."""
        if not self._client.exists(journal.counter_key):
            return 0  # nothing was ever tuned here: no need to import Optuna
        held = journal.replayed()
        done = int(cast(str | None, self._client.get(self._keys.journal_aged)) or 0)
        for start in range(done, held, _BATCH):
            pipe = self._client.pipeline(transaction=False)
            for number in range(start, min(start + _BATCH, held)):
                pipe.expire(journal.entry_key(number), JOURNAL_GRACE_S)
            pipe.execute()
        if held > done:
            self._client.set(self._keys.journal_aged, held)
        return max(0, held - done)
