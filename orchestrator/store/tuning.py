"""What the tuner keeps in Redis: profiles, reports, the tuning cache and the Optuna journal.

Per job (id, or name when tuned by ``orch tune FILE``): its performance profile
(``{ns}:profile:{job}``) and its tuning report (``{ns}:tune:{job}``), JSON documents. The
tuning cache: entries ``{ns}:tune-cache:{fingerprint}`` (JSON) and their index
``{ns}:tune-cache`` (fingerprint -> similarity group). The studies: one Optuna journal per
namespace under the prefix ``{ns}:optuna``, written by Optuna's own Redis backend, which
:class:`StudyJournal` builds.

These stores hold JSON data; what it means (``build_profile``, ``CacheEntry``...) is the
tuner's business (``orchestrator.tuner``).
"""

from __future__ import annotations

import json
import pickle
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import redis

from orchestrator.store.keys import KeyFamily, Keys

if TYPE_CHECKING:
    import optuna

__all__ = ["ProfileStore", "StudyJournal", "TuneCacheStore", "TuneReportStore"]


class _JobDocuments:
    """One JSON document per job, under the key ``key(job)``."""

    def __init__(self, client: redis.Redis, key: Callable[[str], str]) -> None:
        self._client = client
        self._key = key

    def save(self, job: str, document: Mapping[str, Any]) -> None:
        """Store the job's document (replacing the previous one)."""
        self._client.set(self._key(job), json.dumps(document))

    def load(self, job: str) -> dict[str, Any] | None:
        """The job's document, or ``None`` when none was stored."""
        raw = cast(str | None, self._client.get(self._key(job)))
        return json.loads(raw) if raw else None

    def load_many(self, jobs: Iterable[str]) -> dict[str, dict[str, Any] | None]:
        """:meth:`load` of each job, in one ``MGET``."""
        names = list(dict.fromkeys(jobs))
        if not names:
            return {}
        raws = cast(list[str | None], self._client.mget([self._key(j) for j in names]))
        return {j: json.loads(raw) if raw else None for j, raw in zip(names, raws, strict=True)}


class ProfileStore(_JobDocuments):
    """The tuner's performance profiles (``{ns}:profile:{job}``; see
    ``orchestrator.tuner.profile``).

    Args:
        client: the store's Redis client (``decode_responses=True``).
        keys: the namespace's keys.
    """

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        super().__init__(client, keys.profile)


class TuneReportStore(_JobDocuments):
    """The tuning reports ``orch show`` prints (``{ns}:tune:{job}``; see
    ``orchestrator.tuner.service.TuneReport``).

    Args:
        client: the store's Redis client (``decode_responses=True``).
        keys: the namespace's keys.
    """

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        super().__init__(client, keys.tune_report)


class TuneCacheStore(KeyFamily):
    """The tuning cache's entries, by fingerprint, and their similarity index (see
    ``orchestrator.tuner.cache.TuneCache``, which gives them meaning).
    """

    def get(self, fingerprint: str) -> dict[str, Any] | None:
        """The entry stored under ``fingerprint``, or ``None``."""
        raw = cast(str | None, self._client.get(self._keys.tune_cache_entry(fingerprint)))
        return json.loads(raw) if raw else None

    def put(self, fingerprint: str, entry: Mapping[str, Any], group: str) -> None:
        """Store the entry of ``fingerprint`` (replacing it) and index it under ``group``, in
        one transaction."""
        pipe = self._client.pipeline()
        pipe.set(self._keys.tune_cache_entry(fingerprint), json.dumps(entry))
        pipe.hset(self._keys.tune_cache_index, fingerprint, group)
        pipe.execute()

    def fingerprints(self, group: str) -> list[str]:
        """The fingerprints indexed under ``group``."""
        index = cast(dict[str, str], self._client.hgetall(self._keys.tune_cache_index))
        return [fp for fp, g in index.items() if g == group]


@dataclass(frozen=True)
class StudyJournal:
    """Where a namespace's Optuna studies live: one Optuna journal in the orchestrator's Redis,
    its keys under ``prefix`` (built by ``JobStore.study_journal``).

    Any tool that opens ``JournalStorage(JournalRedisBackend(url, prefix=prefix))`` sees every
    study of the namespace (optuna-dashboard, a separate process).

    Attributes:
        url: the orchestrator's Redis (Optuna opens its own connection).
        prefix: the journal's key prefix, ``{ns}:optuna``.
    """

    url: str
    prefix: str

    @classmethod
    def of(cls, url: str, keys: Keys) -> StudyJournal:
        """The journal of the namespace of ``keys`` on the Redis at ``url``."""
        return cls(url, keys.optuna_journal)

    def storage(self) -> optuna.storages.BaseStorage:
        """``JournalStorage(JournalRedisBackend(url, prefix=prefix))`` (imports Optuna)."""
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalRedisBackend

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the Redis journal backend is marked experimental
            return JournalStorage(JournalRedisBackend(self.url, prefix=self.prefix))

    def delete_studies(self, names: Iterable[str]) -> int:
        """Delete those of the named studies that exist (imports Optuna); returns how many.

        Optuna appends a delete to the journal: the study is gone for every reader, and its
        entries are left out of the next snapshot Optuna writes (see :meth:`replayed`).
        """
        wanted = set(names)
        if not wanted:
            return 0
        import optuna

        storage = self.storage()
        present = wanted & set(optuna.get_all_study_names(storage))
        for name in sorted(present):
            optuna.delete_study(study_name=name, storage=storage)
        return len(present)

    def replayed(self) -> int:
        """How many journal entries, from the first, Optuna's latest snapshot holds (0: none).

        Optuna saves a snapshot of every live study every 100 studies or trials; a reader opened
        after it starts from the snapshot, so the entries before it are needed only by a reader
        opened earlier that has not read them yet.
        """
        from optuna.storages.journal import JournalRedisBackend

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the Redis journal backend is marked experimental
            snapshot = JournalRedisBackend(self.url, prefix=self.prefix).load_snapshot()
        if snapshot is None:
            return 0
        # Optuna's own format (a pickled JournalStorageReplayResult), in the orchestrator's own
        # Redis: Optuna unpickles the same bytes whenever it opens the journal.
        return int(pickle.loads(snapshot).log_number_read)

    def entry_key(self, number: int) -> str:
        """The key of journal entry ``number`` (Optuna's Redis backend layout)."""
        return f"{self.prefix}:log:{number}"

    @property
    def counter_key(self) -> str:
        """The key of the journal's last entry number (Optuna's Redis backend layout)."""
        return f"{self.prefix}:log_number"
