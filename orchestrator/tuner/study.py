"""The Optuna study of a job, kept in Redis as an Optuna journal under the namespace prefix.

All studies of a namespace share one journal (``{namespace}:optuna:*``), so any tool that
opens ``JournalStorage(JournalRedisBackend(url, prefix="{namespace}:optuna"))`` sees every
study, e.g. optuna-dashboard (see :func:`dashboard_command`). A study is resumable: the tuner
reads back the trials already in it (rule 4: every long operation can be resumed).
"""

from __future__ import annotations

import contextlib
import warnings
from typing import TYPE_CHECKING

from orchestrator.errors import TuneError
from orchestrator.store.keys import Keys

if TYPE_CHECKING:
    import optuna

__all__ = ["dashboard_command", "journal_prefix", "open_storage", "open_study", "study_name"]


def journal_prefix(namespace: str) -> str:
    """The Redis key prefix of the namespace's Optuna journal."""
    return Keys(namespace).key("optuna")


def study_name(job: str) -> str:
    """The study of one job (its id, or its name for ``orch tune`` without submitting)."""
    return f"tune-{job}"


def open_storage(url: str, namespace: str) -> optuna.storages.BaseStorage:
    """``JournalStorage(JournalRedisBackend(url, prefix=...))`` for the namespace."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalRedisBackend

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the Redis journal backend is marked experimental
        return JournalStorage(JournalRedisBackend(url, prefix=journal_prefix(namespace)))


def open_study(
    url: str,
    namespace: str,
    name: str,
    direction: str,
    sampler: optuna.samplers.BaseSampler | None = None,
    *,
    fresh: bool = False,
) -> optuna.Study:
    """Create or load (resume) a study in the namespace's journal.

    Args:
        fresh: delete an existing study of that name first (a re-tune from scratch).

    Raises:
        TuneError: an existing study was created with the other direction (another SLA).
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(url, namespace)
    if fresh:
        with contextlib.suppress(KeyError):  # nothing to delete
            optuna.delete_study(study_name=name, storage=storage)
    study = optuna.create_study(
        storage=storage,
        study_name=name,
        direction=direction,  # type: ignore[arg-type]
        sampler=sampler,
        load_if_exists=True,
    )
    if study.direction.name.lower() != direction:
        raise TuneError(
            f"study {name!r} exists with direction {study.direction.name.lower()}, the SLA now "
            f"needs {direction}; re-tune with --fresh"
        )
    return study


def dashboard_command(url: str, namespace: str) -> str:
    """A shell command that opens optuna-dashboard on the namespace's studies.

    optuna-dashboard's ``redis://`` URL form has no key prefix, so the storage is built in
    Python and handed to ``optuna_dashboard.run_server``.
    """
    code = (
        "import optuna_dashboard as d; "
        "from optuna.storages import JournalStorage; "
        "from optuna.storages.journal import JournalRedisBackend; "
        f"d.run_server(JournalStorage(JournalRedisBackend({url!r}, "
        f"prefix={journal_prefix(namespace)!r})), port=8080)"
    )
    return f'pip install optuna-dashboard && python -c "{code}"'
