"""The Optuna study of a job, kept in the namespace's Optuna journal in Redis.

All studies of a namespace share one journal (``orchestrator.store.StudyJournal``, keys under
``{namespace}:optuna``), so any tool that opens it sees every study, e.g. optuna-dashboard (see
:func:`dashboard_command`). A study is resumable: the tuner reads back the trials already in
it (rule 4: every long operation can be resumed).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from orchestrator.errors import TuneError

if TYPE_CHECKING:
    import optuna

    from orchestrator.store.tuning import StudyJournal

__all__ = ["dashboard_command", "open_study", "study_name"]


def study_name(job: str) -> str:
    """The study of one job (its id, or its name for ``orch tune`` without submitting)."""
    return f"tune-{job}"


def open_study(
    journal: StudyJournal,
    name: str,
    direction: str,
    sampler: optuna.samplers.BaseSampler | None = None,
    *,
    fresh: bool = False,
) -> optuna.Study:
    """Create or load (resume) a study in the namespace's journal.

    Args:
        journal: the namespace's journal (``JobStore.study_journal``).
        fresh: delete an existing study of that name first (a re-tune from scratch).

    Raises:
        TuneError: an existing study was created with the other direction (another SLA).
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = journal.storage()
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


def dashboard_command(journal: StudyJournal) -> str:
    """A shell command that opens optuna-dashboard on the namespace's studies.

    optuna-dashboard's ``redis://`` URL form has no key prefix, so the storage is built in
    Python and handed to ``optuna_dashboard.run_server``.
    """
    code = (
        "import optuna_dashboard as d; "
        "from optuna.storages import JournalStorage; "
        "from optuna.storages.journal import JournalRedisBackend; "
        f"d.run_server(JournalStorage(JournalRedisBackend({journal.url!r}, "
        f"prefix={journal.prefix!r})), port=8080)"
    )
    return f'pip install optuna-dashboard && python -c "{code}"'
