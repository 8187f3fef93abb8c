"""The Optuna study of a job, kept in the namespace's Optuna journal in Redis.

All studies of a namespace share one journal (``orchestrator.store.StudyJournal``, keys under
``{namespace}:optuna``), so any tool that opens it sees every study, e.g. optuna-dashboard (see
:func:`dashboard_command`). A study is resumable: the tuner reads back the trials already in
it (rule 4: every long operation can be resumed).

What optuna-dashboard shows: the objective under its name (``study.set_metric_names``, see
:func:`objective_name`), and a trial that misses the SLA as infeasible. For the latter the
constraints are written twice (:func:`record_constraints`): by name, as Optuna 5 keeps them
(``trial.set_constraint``: system attributes ``constraints:<name>``), and as the list under
``constraints`` that optuna-dashboard 0.21 reads (``_serializer.serialize_frozen_trial``; it
marks a trial feasible when every value is <= 0). Optuna reads both forms into
``FrozenTrial.constraints``, so there each value appears twice, under its name and under its
position: feasibility, and TPE's ordering of infeasible trials (by the sum of violations),
are unchanged.
"""

from __future__ import annotations

import contextlib
import shlex
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.errors import TuneError

if TYPE_CHECKING:
    import optuna

    from orchestrator.store.tuning import StudyJournal
    from orchestrator.tuner.objective import Goal

__all__ = [
    "CONSTRAINTS_ATTR",
    "dashboard_command",
    "objective_name",
    "open_study",
    "record_constraints",
    "study_name",
]

CONSTRAINTS_ATTR = "constraints"
"""The trial system attribute optuna-dashboard reads the constraint values from (a list)."""


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
    metric_name: str | None = None,
) -> optuna.Study:
    """Create or load (resume) a study in the namespace's journal.

    Args:
        journal: the namespace's journal (``JobStore.study_journal``).
        fresh: delete an existing study of that name first (a re-tune from scratch).
        metric_name: what the objective is (:func:`objective_name`), for the dashboard.

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
    if metric_name is not None and study.metric_names != [metric_name]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # set_metric_names is marked experimental
            study.set_metric_names([metric_name])
    return study


def objective_name(goal: Goal) -> str:
    """The name of a goal's objective value (``Goal.value_of``): ``gpu_s_per_sample`` (or per
    token; ``j_per_sample``, ``j_per_token`` under an energy cost) for a throughput floor,
    minimised; the rate itself under a latency ceiling."""
    if goal.serving:
        return "gpu_s_per_request"
    if goal.kind == "throughput":
        spent = "j" if goal.cost == "energy" else "gpu_s"
        return f"{spent}_per_token" if goal.metric == "tokens_per_s" else f"{spent}_per_sample"
    return goal.metric


def record_constraints(trial: optuna.Trial, constraints: Mapping[str, float]) -> None:
    """Set a trial's constraints (<= 0 satisfied) where Optuna 5 and optuna-dashboard both
    read them (see the module doc): by name, and as one list in the names' sorted order."""
    names = sorted(constraints)
    for name in names:
        trial.set_constraint(name, constraints[name])
    # Optuna 5 has no public setter for a trial's system attributes; its storage has.
    trial.storage.set_trial_system_attr(
        trial._trial_id, CONSTRAINTS_ATTR, [float(constraints[n]) for n in names]
    )


def dashboard_command(journal: StudyJournal, password_file: Path | None = None) -> str:
    """A shell command that opens optuna-dashboard on the namespace's studies.

    optuna-dashboard's ``redis://`` URL form has no key prefix, so the storage is built in
    Python and handed to ``optuna_dashboard.run_server``. The command never holds a password:
    the URL is read from ``$REDIS_URL``, which the command sets from ``password_file`` (the
    embedded server's) when given, else is expected set as for ``orch`` itself.
    """
    from orchestrator.store.connection import redact

    code = (
        "import os, optuna_dashboard as d; "
        "from optuna.storages import JournalStorage; "
        "from optuna.storages.journal import JournalRedisBackend; "
        "d.run_server(JournalStorage(JournalRedisBackend(os.environ['REDIS_URL'], "
        f"prefix={journal.prefix!r})), port=8080)"
    )
    shown = redact(journal.url)
    if shown == journal.url:  # no password: the URL itself
        env = f"REDIS_URL={shlex.quote(journal.url)} "
    elif password_file is not None:
        url = shown.replace(":***@", f":$(cat {shlex.quote(str(password_file))})@", 1)
        env = f'REDIS_URL="{url}" '
    else:
        env = ""
    # `python -m pip`: the dashboard goes where the `python` that runs it looks
    return f'python -m pip install optuna-dashboard && {env}python -c "{code}"'
