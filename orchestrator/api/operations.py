"""Every read and mutation of the API, authorised for a principal and (mutations) audited.

The HTTP routers and the CLI's direct mode (a local admin) both call these, so a rule (who may
cancel what) and the audit record of an action exist once. Authorisation happens before
anything is written: a refused batch writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from orchestrator.api.identity import Principal
from orchestrator.api.models import JobDetail, JobView
from orchestrator.errors import JobEnded, SpecError, TuneError
from orchestrator.sla import DeadlineCheck, check_deadline, profile_rate
from orchestrator.spec import JobSpec
from orchestrator.store import JobStore
from orchestrator.store.audit import AuditEntry
from orchestrator.store.records import JobRecord
from orchestrator.store.states import TERMINAL, JobState
from orchestrator.store.tokens import Role, TokenInfo
from orchestrator.teams import TeamConfig

__all__ = [
    "apply_teams",
    "cancel",
    "create_token",
    "job_detail",
    "job_view",
    "list_jobs",
    "list_tokens",
    "read_audit",
    "read_job",
    "revoke_token",
    "submit",
]


def _audit(
    store: JobStore, who: Principal, action: str, targets: list[str], detail: str = ""
) -> None:
    store.audit.record(
        actor=who.name,
        role=who.role.value,
        team=who.team,
        action=action,
        targets=targets,
        detail=detail,
    )


# ---- jobs ------------------------------------------------------------------------------------


def deadline_checks(store: JobStore, specs: Sequence[JobSpec]) -> list[DeadlineCheck]:
    """Each job's deadline judged against its tuned rate (``store.profiles`` by job name)."""
    return [
        check_deadline(s, profile_rate(store.profiles.load(s.name), s.resources.gpus.upper))
        for s in specs
        if s.sla.throughput is not None and s.sla.throughput.deadline_s is not None
    ]


def submit(
    store: JobStore,
    who: Principal,
    specs: Sequence[JobSpec],
    *,
    by: str | None = None,
    strict: bool = False,
) -> list[str]:
    """Queue jobs: all of them, or none.

    Args:
        by: recorded as the submitter; defaults to the principal's name (the API never passes
            it: there the submitter is the authenticated principal).
        strict: refuse the jobs when one's deadline cannot be met even on all its allowed
            GPUs at its tuned rate (see :func:`deadline_checks`).

    Raises:
        Forbidden: a viewer, or a member submitting for another team (nothing is written).
        SpecError: the team config refuses one of the jobs, or ``strict`` and a deadline
            cannot be met (nothing is written).
    """
    for spec in specs:
        who.check_write(spec.team)
    if strict:
        missed = [c.message for c in deadline_checks(store, specs) if c.ok is False]
        if missed:
            raise SpecError("deadline check (--strict)", missed)
    ids = store.submit_many(specs, by=by or who.name)
    teams = sorted({s.team for s in specs})
    _audit(store, who, "submit", ids, f"team {', '.join(teams)}")
    return ids


def cancel(store: JobStore, who: Principal, ref: str) -> JobRecord:
    """Cancel a job (see :meth:`JobStore.cancel`), in the principal's name.

    Raises:
        JobNotFound, AmbiguousJob: ``ref`` names no job, or several.
        Forbidden: a viewer, or a member of another team.
        JobEnded: the job has ended or is being stopped already.
    """
    job_id = store.resolve(ref)
    who.check_write(store.get(job_id).team)
    rec = store.cancel(job_id, message=f"cancelled by {who.name}")
    _audit(store, who, "cancel", [job_id], f"team {rec.team}")
    return rec


def request_tune(store: JobStore, who: Principal, ref: str) -> JobRecord:
    """Ask for a running job to be re-tuned from what it measures (see
    ``ControlLoop.forward_tune_requests``), in the principal's name.

    Raises:
        JobNotFound, AmbiguousJob: ``ref`` names no job, or several.
        Forbidden: a viewer, or a member of another team.
        JobEnded: the job has ended.
        TuneError: the job is not running, or does not ask to be tuned.
    """
    job_id = store.resolve(ref)
    rec = store.get(job_id)
    who.check_write(rec.team)
    if rec.state in TERMINAL:
        raise JobEnded(job_id, rec.state.value)
    if not rec.spec.tuning.enabled:
        raise TuneError(f"job {job_id}: tuning.enabled is false: its settings are used as given")
    if rec.state is not JobState.RUNNING:
        raise TuneError(
            f"job {job_id} is {rec.state.value}: only a running job is re-tuned "
            "(a waiting job is tuned when it first starts)"
        )
    store.request_tune(job_id)
    _audit(store, who, "tune", [job_id], f"team {rec.team}")
    return rec


def read_job(store: JobStore, who: Principal, ref: str) -> JobRecord:
    """The job ``ref`` names, if the principal may read it.

    Raises:
        JobNotFound, AmbiguousJob: ``ref`` names no job, or several.
        Forbidden: a member or viewer of another team.
    """
    rec = store.get(store.resolve(ref))
    who.check_read(rec.team)
    return rec


def list_jobs(
    store: JobStore,
    who: Principal,
    *,
    states: Iterable[str] | None = None,
    team: str | None = None,
    job_class: str | None = None,
    limit: int | None = 50,
) -> list[JobRecord]:
    """Jobs in submit order (the ``limit`` newest that match); a principal that reads one
    team only sees that team's.

    Raises:
        Forbidden: a member or viewer asking for another team.
    """
    if team is not None:
        who.check_read(team)
    elif not who.reads_all:
        team = who.team
    wanted = None if states is None else [JobState(s) for s in states] or None
    if team is None and job_class is None:
        return store.list(states=wanted, limit=limit)
    records = [
        r
        for r in store.list(states=wanted)
        if (team is None or r.team == team) and (job_class is None or r.job_class == job_class)
    ]
    return records[-limit:] if limit is not None else records


def job_view(store: JobStore, rec: JobRecord) -> JobView:
    """A record with its SLA verdict from its latest metrics."""
    from orchestrator.views import verdict_of

    return JobView.of(rec, verdict_of(store, rec))


def job_detail(store: JobStore, rec: JobRecord) -> JobDetail:
    """Everything ``orch show`` prints about a job."""
    tuning: dict[str, Any] | None = None
    profile: dict[str, Any] | None = None
    for key in (rec.id, rec.name):  # tuned with the job, or beforehand by `orch tune FILE`
        tuning = store.tune_reports.load(key)
        if tuning is not None:
            profile = store.profiles.load(key)
            break
    return JobDetail(
        job=job_view(store, rec),
        metrics=store.metrics(rec.id),
        events=store.events(rec.id),
        tuning=tuning,
        profile=profile,
    )


# ---- teams, tokens, audit --------------------------------------------------------------------


def apply_teams(store: JobStore, who: Principal, config: TeamConfig) -> None:
    """Store a team config (the guarantees must fit the pool, when a scheduler is up).

    Raises:
        Forbidden: not an admin.
        SpecError: the guarantees add up to more than the pool's GPUs.
    """
    who.check_admin("apply a team config")
    view = store.pool_view.read()
    if view is not None:
        config.views(sum(int(n["gpus"]) for n in view.get("nodes", [])))
    store.put_teams(config)
    _audit(store, who, "teams.apply", ["teams"], f"{len(config.teams)} team(s)")


def create_token(
    store: JobStore, who: Principal, *, name: str, role: Role, team: str | None
) -> tuple[str, TokenInfo]:
    """Make an API token; returns the token (shown once) and its record.

    Raises:
        Forbidden: not an admin.
        SpecError: a member token without a team.
    """
    who.check_admin("create tokens")
    if role is Role.MEMBER and team is None:
        raise SpecError("token", ["team is required for a member (a member acts for one team)"])
    token, info = store.tokens.create(name=name, role=role, team=team, created_by=who.name)
    _audit(store, who, "tokens.create", [info.id], f"{name}: {role.value} of {team or 'all'}")
    return token, info


def list_tokens(store: JobStore, who: Principal) -> list[TokenInfo]:
    """Every token's record (never a secret).

    Raises:
        Forbidden: not an admin.
    """
    who.check_admin("list tokens")
    return store.tokens.list()


def revoke_token(store: JobStore, who: Principal, token_id: str) -> TokenInfo:
    """Revoke a token: it never authenticates again.

    Raises:
        Forbidden: not an admin.
        TokenNotFound: no such token.
    """
    who.check_admin("revoke tokens")
    info = store.tokens.revoke(token_id, by=who.name)
    _audit(store, who, "tokens.revoke", [token_id], info.name)
    return info


def read_audit(
    store: JobStore, who: Principal, count: int = 100, action: str | None = None
) -> list[AuditEntry]:
    """The latest audit entries, oldest first.

    Raises:
        Forbidden: not an admin.
    """
    who.check_admin("read the audit stream")
    return store.audit.read(count, action=action)
