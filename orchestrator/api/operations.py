"""Every read and mutation of the API, authorised for a principal and (mutations) audited.

The HTTP routers and the CLI's direct mode (a local admin) both call these, so a rule (who may
cancel what) and the audit record of an action exist once. Authorisation happens before
anything is written: a refused batch writes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from pydantic import ValidationError

from orchestrator.api.identity import Principal
from orchestrator.api.models import JobDetail, JobView, Submitted, Usage, UsageRow
from orchestrator.errors import (
    AmbiguousJob,
    Forbidden,
    JobEnded,
    JobNotFound,
    NotAService,
    OrchError,
    SpecError,
    TokenNotFound,
    TuneError,
)
from orchestrator.sla import (
    DeadlineCheck,
    SLAVerdict,
    check_deadline,
    evaluate_sla,
    plan_verdicts,
    profile_rate,
    refusal,
)
from orchestrator.spec import JobSpec
from orchestrator.store import JobStore
from orchestrator.store.audit import AuditEntry
from orchestrator.store.logs import LogEntry
from orchestrator.store.records import JobRecord
from orchestrator.store.states import HOLDING, TERMINAL, JobState
from orchestrator.store.tokens import Role, TokenInfo
from orchestrator.teams import MAX_TEAM_GPUS, TeamConfig
from orchestrator.weights import trained_weights

__all__ = [
    "apply_teams",
    "cancel",
    "create_token",
    "follow_logs",
    "gpu_s_since",
    "guarantee_problem",
    "job_detail",
    "job_view",
    "list_jobs",
    "list_tokens",
    "read_audit",
    "read_job",
    "read_logs",
    "revoke_token",
    "submit",
    "submit_each",
]


def _audit(
    store: JobStore, who: Principal, action: str, targets: list[str], detail: str = ""
) -> None:
    store.audit.record_many(_entry(who, action, target, detail) for target in targets)


# ---- jobs ------------------------------------------------------------------------------------


def deadline_checks(store: JobStore, specs: Sequence[JobSpec]) -> list[DeadlineCheck]:
    """Each job's deadline judged against its tuned rate (``store.profiles`` by job name)."""
    return [
        check_deadline(s, profile_rate(store.profiles.load(s.name), s.resources.gpus.upper))
        for s in specs
        if s.sla.throughput is not None and s.sla.throughput.deadline_s is not None
    ]


def plan_declines(store: JobStore, specs: Sequence[JobSpec]) -> list[str]:
    """Why the scheduler's plan declines each deadline job of ``specs`` that it declines:
    the jobs judged together, EDF, on the plan of free GPUs over time the scheduler last
    published (its admitted deadline jobs in place; see ``policies.scheduling.plan``), from
    each job's work estimate (``JobStore.work_estimates``). No plan published (no scheduler
    runs) or no work estimate (no profile under the job's name): no verdict, nothing listed.

    The plan is at most a second or so old: the scheduler's own verdict, on its next round,
    is the job's ``admission`` event.
    """
    if not any(s.sla.throughput is not None and s.sla.throughput.deadline_s for s in specs):
        return []
    plan = (store.pool_view.read() or {}).get("plan")
    now = time.time()
    verdicts = plan_verdicts(plan, specs, store.work_estimates(specs), now)
    return [refusal(specs[i], v, now) for i, v in sorted(verdicts.items()) if not v.admitted]


def submit(
    store: JobStore,
    who: Principal,
    specs: Sequence[JobSpec],
    *,
    by: str | None = None,
    strict: bool = False,
) -> Submitted:
    """Queue jobs: all of them, or none.

    Args:
        by: recorded as the submitter; defaults to the principal's name (the API never passes
            it: there the submitter is the authenticated principal).
        strict: refuse the jobs when one's deadline cannot be met even on all its allowed
            GPUs at its tuned rate (see :func:`deadline_checks`), or when the scheduler's
            plan declines it beside the deadline jobs already admitted (see
            :func:`plan_declines`).

    Returns:
        The new ids in order, and the warnings to show whoever submitted (see
        :func:`_warnings`): the API's reply and the CLI's direct mode are both this.

    Raises:
        Forbidden: a viewer, or a member submitting for another team (nothing is written).
        SpecError: the team config refuses one of the jobs, or ``strict`` and a deadline
            cannot be met (nothing is written).
    """
    for spec in specs:
        who.check_write(spec.team)
        trained_weights(store, spec)  # a service serving a job's model: one it may serve
    checks = deadline_checks(store, specs)
    declines = plan_declines(store, specs)
    if strict:
        missed = [c.message for c in checks if c.ok is False]
        advice = "; give a later deadline, or submit without --strict to run it best effort"
        missed = missed or [m + advice for m in declines]
        if missed:
            raise SpecError("deadline check (--strict)", missed)
    if len(specs) == 1:  # one script call, not a pipeline (which first asks SCRIPT EXISTS)
        ids = [store.submit(specs[0], by=by or who.name).id]
    else:
        ids = store.submit_many(specs, by=by or who.name)
    teams = sorted({s.team for s in specs})
    _audit(store, who, "submit", ids, f"team {', '.join(teams)}")
    return Submitted(ids=ids, warnings=_warnings(checks, declines))


def _warnings(checks: Sequence[DeadlineCheck], declines: Sequence[str]) -> list[str]:
    """What a submission that was queued tells its submitter: each deadline note or miss
    (:func:`deadline_checks`) and each job the scheduler's plan declines
    (:func:`plan_declines`), which then runs best effort. Built here only, so the API's
    reply and the CLI's direct mode say the same (a strict submission that is queued has
    neither misses nor declines: only the notes remain)."""
    notes = [check.message for check in checks if check.message]
    return notes + [f"{m}; it runs best effort" for m in declines]


def submit_each(
    store: JobStore, requests: Sequence[tuple[Principal, JobSpec]]
) -> list[Submitted | OrchError]:
    """Queue one job per request, each on its own, as :func:`submit` (not ``strict``) of each
    would, in a few round trips for them all (the API's concurrent single submissions).

    Returns:
        Each job's id with its warnings (judged alone: the request's own submission), or
        why it was refused (:class:`Forbidden`, :class:`SpecError`: nothing of it written),
        in order; the jobs not refused are written and audited all the same.
    """
    outcomes: list[str | OrchError] = []
    for who, spec in requests:
        try:
            who.check_write(spec.team)
            trained_weights(store, spec)
            outcomes.append("")
        except (Forbidden, SpecError) as err:
            outcomes.append(err)
    allowed = [i for i, outcome in enumerate(outcomes) if outcome == ""]
    written = store.submit_each(
        [requests[i][1] for i in allowed], [requests[i][0].name for i in allowed]
    )
    for i, outcome in zip(allowed, written, strict=True):
        outcomes[i] = outcome
    store.audit.record_many(
        _entry(requests[i][0], "submit", outcome, f"team {requests[i][1].team}")
        for i, outcome in enumerate(outcomes)
        if isinstance(outcome, str)
    )
    answers: list[Submitted | OrchError] = []
    for done, (_, spec) in zip(outcomes, requests, strict=True):
        if isinstance(done, OrchError):
            answers.append(done)
        else:  # no store read for a job without a deadline (the hot path)
            warnings = _warnings(deadline_checks(store, [spec]), plan_declines(store, [spec]))
            answers.append(Submitted(ids=[done], warnings=warnings))
    return answers


def _entry(who: Principal, action: str, target: str, detail: str) -> dict[str, str]:
    """An audit entry's fields (see ``AuditStore.record_many``)."""
    return {
        "actor": who.name,
        "role": who.role.value,
        "team": who.team or "",
        "action": action,
        "target": target,
        "detail": detail,
    }


def store_working_dir(store: JobStore, who: Principal, data: bytes) -> str:
    """Keep a command job's packed working directory (``orch submit --working-dir``); returns
    its digest, which the jobs that run in it name as ``workload.working_dir``.

    Raises:
        Forbidden: a viewer (nothing is written).
        WorkingDirError: not a zip, past the size limit unpacked, or a name leaving it.
    """
    from orchestrator.workdir import check_archive

    who.check_write(who.team or "")  # a member for its own team, an admin: not a viewer
    check_archive(data)
    digest = store.working_dirs.put(data)
    _audit(store, who, "working-dir", [digest], f"{len(data):,} bytes")
    return digest


def cancel(store: JobStore, who: Principal, ref: str) -> JobRecord:
    """Cancel a job (see :meth:`JobStore.cancel`), in the principal's name.

    Raises:
        JobNotFound, AmbiguousJob: ``ref`` names no job the principal may read, or several.
        Forbidden: a viewer, or a viewer of every team.
        JobEnded: the job has ended or is being stopped already.
    """
    job_id = read_job(store, who, ref).id
    who.check_write(store.get(job_id).team)
    rec = store.cancel(job_id, message=f"cancelled by {who.name}")
    _audit(store, who, "cancel", [job_id], f"team {rec.team}")
    return rec


def request_tune(store: JobStore, who: Principal, ref: str) -> JobRecord:
    """Ask for a running job to be re-tuned from what it measures (see
    ``ControlLoop.forward_tune_requests``), in the principal's name.

    Raises:
        JobNotFound, AmbiguousJob: ``ref`` names no job the principal may read, or several.
        Forbidden: a viewer, or a viewer of every team.
        JobEnded: the job has ended.
        TuneError: the job is not running, or does not ask to be tuned.
    """
    rec = read_job(store, who, ref)
    job_id = rec.id
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
    """The job ``ref`` names among those the principal may read.

    Another team's job is not found, exactly as a missing one: a refusal (403) would tell an
    outsider that the id or name exists. A name several teams use names the caller's own job.

    Raises:
        JobNotFound: ``ref`` names no job the principal may read (the same answer whether
            or not another team's job has this id or name).
        AmbiguousJob: ``ref`` names several jobs the principal may read (only those listed).
    """
    if who.reads_all:
        return store.get(store.resolve(ref))
    try:
        candidates = [store.resolve(ref)]
    except AmbiguousJob as err:
        candidates = err.matches
    readable = [rec for rec in store.get_many(candidates) if who.may_read(rec.team)]
    if not readable:
        raise JobNotFound(ref)
    if len(readable) > 1:
        raise AmbiguousJob(ref, [rec.id for rec in readable])
    return readable[0]


def read_logs(
    store: JobStore, who: Principal, ref: str, *, rank: int | None = None, tail: int | None = None
) -> list[LogEntry]:
    """The output kept of the job ``ref`` names (``tail`` lines of each rank, only ``rank``'s
    if given), oldest first: whoever may read the job may read its output.

    Raises:
        JobNotFound, AmbiguousJob: as :func:`read_job`.
    """
    return store.logs.tail(read_job(store, who, ref).id, rank=rank, count=tail)


def follow_logs(
    store: JobStore,
    who: Principal,
    ref: str,
    *,
    rank: int | None = None,
    tail: int | None = None,
) -> Iterator[list[LogEntry]]:
    """Follow the output of the job ``ref`` names, as ``orch logs -f`` and the API's stream
    both do: the lines kept as a first batch, then batches of new lines until the job ends
    and its last lines are drained (see ``LogStore.follow``; an empty batch: nothing came
    for a couple of seconds).

    Not a generator itself: the job is found and the principal's right to read it checked
    at the call, so the API refuses (404) before its stream's 200 is sent.

    Raises:
        JobNotFound, AmbiguousJob: as :func:`read_job` (at the call).
    """
    job_id = read_job(store, who, ref).id

    def ended() -> bool:
        return store.get(job_id).terminal

    return store.logs.follow(job_id, ended, rank=rank, tail=tail)


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


def verdict_of(store: JobStore, rec: JobRecord) -> SLAVerdict:
    """The SLA verdict of a job from its latest metrics (none if its stored spec is unreadable,
    e.g. written by an older version: listing jobs must never fail on one of them)."""
    try:
        rec.spec  # noqa: B018 - parsing is the check
    except ValidationError:
        return SLAVerdict(met=None, target="(stored spec unreadable)", measured="-")
    metrics = store.judged_metrics(rec)
    finished_at = _float(rec.fields.get("finished_at"))
    end = finished_at or time.time()
    return evaluate_sla(
        rec.spec,
        metrics,
        elapsed_s=end - rec.submitted_at,
        finished=rec.state is JobState.FINISHED,
        ended=_ended(rec.state),
    )


def _ended(state: JobState) -> str:
    """``"cancelled"`` or ``"failed"`` for a job that ended so (see ``evaluate_sla``)."""
    return state.value if state in (JobState.CANCELLED, JobState.FAILED) else ""


def _float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def job_view(store: JobStore, rec: JobRecord) -> JobView:
    """A record with its SLA verdict from its latest metrics."""
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
        metrics=store.judged_metrics(rec),
        events=store.events(rec.id),
        tuning=tuning,
        profile=profile,
    )


def usage(store: JobStore, who: Principal, *, since: float, team: str | None = None) -> Usage:
    """GPU-seconds per job and per team held since ``since`` (epoch seconds): each job that
    held GPUs in the window, for the part of its use that lies in it (a job that never ran
    held none; a run still going counts up to now). A principal that reads one team only
    sees that team's.

    Raises:
        Forbidden: a member or viewer asking for another team.
    """
    records = list_jobs(store, who, team=team, limit=None)
    now = time.time()
    rows = []
    for rec in records:
        finished = _float(rec.fields.get("finished_at"))
        if finished is not None and finished < since:
            continue
        gpu_s = rec.history.attained_service  # its ended runs'
        if gpu_s and rec.submitted_at < since:  # some of it may be from before the window
            gpu_s = gpu_s_since(gpu_s, store.events(rec.id), since)
        started = _float(rec.fields.get("started_at"))
        if rec.state is JobState.RUNNING and rec.placement and started is not None:
            gpus = len(rec.placement.get("nodes", []))
            gpu_s += max(0.0, now - max(started, since)) * gpus
        if gpu_s <= 0.0 and rec.state not in HOLDING:
            continue  # held no GPU in the window
        rows.append(
            UsageRow.model_validate(
                {
                    "id": rec.id,
                    "name": rec.name,
                    "team": rec.team,
                    "class": rec.job_class,
                    "state": rec.state,
                    "gpu_s": gpu_s,
                    "submitted_at": rec.submitted_at,
                    "finished_at": finished,
                }
            )
        )
    teams: dict[str, float] = {}
    for row in rows:
        teams[row.team] = teams.get(row.team, 0.0) + row.gpu_s
    seen = team if team is not None else (None if who.reads_all else who.team)
    accounts = {
        name: gpu_s
        for name, gpu_s in store.telemetry.read().counter("gpu_seconds").items()
        if seen is None or name == seen
    }
    return Usage(since=since, at=now, jobs=rows, teams=teams, accounts=accounts)


def gpu_s_since(gpu_s: float, events: Sequence[dict[str, Any]], since: float) -> float:
    """The part of ``gpu_s``, the GPU-seconds of a job's ended runs, held since ``since``.

    A run's GPUs are not stored per run, so each ended run's span (from its job entering a
    state that holds GPUs to leaving them, read from the job's state changes ``events``) is
    taken to hold them alike: the share of the spans' time since ``since`` is the share of
    ``gpu_s``. Exact when every run held as many GPUs; a job resized across ``since`` is
    shared by time. With no ended span known (the event stream is capped), all of it counts.
    """
    spans: list[tuple[float, float]] = []
    start: float | None = None
    for ev in events:
        try:
            state = JobState(str(ev.get("event")))
        except ValueError:  # an event that changes no state (``sla-violated``...)
            continue
        ts = float(ev["ts"])
        if state in HOLDING:
            start = ts if start is None else start
        elif start is not None:
            spans.append((start, ts))
            start = None
    held = sum(end - begin for begin, end in spans)
    if held <= 0.0:
        return gpu_s
    inside = sum(max(0.0, end - max(begin, since)) for begin, end in spans)
    return gpu_s * inside / held


# ---- teams, tokens, audit --------------------------------------------------------------------


def guarantee_problem(config: TeamConfig, pool_gpus: int | None) -> str | None:
    """Why the teams' guarantees cannot all be kept (``None``: they can).

    Args:
        pool_gpus: the GPUs of the pool the running scheduler publishes; ``None`` when none
            runs: the pool's size is then unknown, and the guarantees are bounded by
            :data:`~orchestrator.teams.MAX_TEAM_GPUS` in all (the most one team may have).
    """
    total = sum(t.guaranteed_gpus for t in config.teams)
    if pool_gpus is not None and total > pool_gpus:
        return (
            f"teams.guaranteed_gpus add up to {total:,}, more than the pool's {pool_gpus:,} "
            f"GPUs; guarantee at most {pool_gpus:,} in all"
        )
    if pool_gpus is None and total > MAX_TEAM_GPUS:
        return (
            f"teams.guaranteed_gpus add up to {total:,}; at most {MAX_TEAM_GPUS:,} in all while "
            "the pool's size is unknown (no scheduler is running: with one up, they are "
            "checked against its GPUs)"
        )
    return None


def apply_teams(store: JobStore, who: Principal, config: TeamConfig) -> None:
    """Store a team config whose guarantees fit the pool (``orch teams apply`` and
    ``PUT /v1/teams`` both come here, so both refuse the same).

    Raises:
        Forbidden: not an admin.
        SpecError: the guarantees add up to more than the pool's GPUs (see
            :func:`guarantee_problem`).
    """
    who.check_admin("apply a team config")
    view = store.pool_view.read()
    pool_gpus = None if view is None else sum(int(n["gpus"]) for n in view.get("nodes", []))
    problem = guarantee_problem(config, pool_gpus)
    if problem is not None:
        raise SpecError("teams", [problem])
    store.put_teams(config)
    _audit(store, who, "teams.apply", ["teams"], f"{len(config.teams)} team(s)")


def pool_for(who: Principal, view: dict[str, Any]) -> dict[str, Any]:
    """The published pool ``view`` as ``who`` may see it: nodes and each team's use are no
    secret, but which jobs hold GPUs is read like the jobs themselves (a member or team viewer
    sees its own team's only; a view without job teams, from an older scheduler, shows them
    none)."""
    if who.reads_all:
        return view
    teams = view.get("job_teams") or {}
    mine = {job for job, team in teams.items() if team == who.team}
    return {
        **view,
        "jobs": {job: nodes for job, nodes in (view.get("jobs") or {}).items() if job in mine},
        "job_teams": {job: who.team for job in mine},
    }


def create_token(
    store: JobStore, who: Principal, *, name: str, role: Role, team: str | None
) -> tuple[str, TokenInfo]:
    """Make an API token; returns the token (shown once) and its record.

    A token may name a team the team config does not list when the config accepts jobs from
    such teams (``allow_unlisted``, the default), as a new team's first member needs.

    Raises:
        Forbidden: not an admin.
        SpecError: a member token without a team, or a team the team config refuses.
    """
    who.check_admin("create tokens")
    if role is Role.SERVICE:
        raise SpecError(
            "role",
            [
                "a service token is made for its service: POST /v1/services/{job}/tokens "
                "(orch tokens create --service JOB)"
            ],
        )
    if role is Role.MEMBER and team is None:
        raise SpecError("token", ["team is required for a member (a member acts for one team)"])
    config = store.teams()
    if (
        config is not None
        and not config.allow_unlisted
        and team is not None
        and config.team(team) is None
    ):
        names = ", ".join(sorted(t.name for t in config.teams))
        raise SpecError(
            "token",
            [
                f"team {team!r} is not in the team config, which refuses unlisted teams "
                f"(allow_unlisted: false); listed: {names}"
            ],
        )
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


def create_service_token(
    store: JobStore, who: Principal, ref: str, name: str
) -> tuple[str, TokenInfo]:
    """Make a token that reaches one service's endpoint and nothing else, for the service's
    own clients: an admin or a member of the service's team may.

    Raises:
        JobNotFound: ``ref`` names no job the principal may read.
        Forbidden: a viewer, or a member of another team.
        NotAService: the job is not a service with an endpoint.
    """
    rec = read_job(store, who, ref)
    who.check_write(rec.team)
    check_endpoint(rec)
    token, info = store.tokens.create(
        name=name, role=Role.SERVICE, team=rec.team, created_by=who.name, service=rec.id
    )
    _audit(store, who, "tokens.create", [info.id], f"service {rec.id} for {name}")
    return token, info


def revoke_service_token(store: JobStore, who: Principal, ref: str, token_id: str) -> TokenInfo:
    """Revoke a token of one service (an admin or a member of its team may).

    Raises:
        JobNotFound: ``ref`` names no job the principal may read.
        Forbidden: a viewer, or a member of another team.
        TokenNotFound: no token of this service has that id.
    """
    rec = read_job(store, who, ref)
    who.check_write(rec.team)
    if store.tokens.get(token_id).service != rec.id:
        raise TokenNotFound(token_id)
    info = store.tokens.revoke(token_id, by=who.name)
    _audit(store, who, "tokens.revoke", [token_id], info.name)
    return info


def check_endpoint(rec: JobRecord) -> None:
    """Refuse a job that is not a service with an endpoint.

    Raises:
        NotAService: no ``serve:``, or ``serve.endpoint`` is false.
    """
    serve = rec.spec.serve
    if serve is None or not serve.endpoint:
        raise NotAService(
            f"job {rec.id} is not a service with an endpoint: its job file needs a serve: "
            "section without endpoint: false"
        )


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
