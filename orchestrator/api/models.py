"""The API's request and response bodies (pydantic, no FastAPI: the SDK client imports them).

Requests reuse the models the CLI validates files with (``JobSpec``, ``TeamConfig``), so a body
is checked exactly as a file is; responses are read-only views of what the store holds.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.sla import SLAVerdict
from orchestrator.spec import NAME_PATTERN, JobSpec
from orchestrator.store.records import JobRecord
from orchestrator.store.states import JobState
from orchestrator.store.tokens import Role, TokenInfo

__all__ = [
    "MAX_BATCH",
    "JobBatch",
    "JobDetail",
    "JobView",
    "Submitted",
    "TokenCreate",
    "TokenCreated",
    "Usage",
    "UsageRow",
    "Verdict",
    "WhoAmI",
    "WorkingDirStored",
]

MAX_BATCH = 10_000
"""Most jobs one batch submission may carry."""


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Verdict(_Body):
    """Whether a job meets its SLA (``met`` is ``None`` until something is measured)."""

    met: bool | None
    target: str
    measured: str

    @classmethod
    def of(cls, verdict: SLAVerdict) -> Verdict:
        """The body of an :class:`~orchestrator.sla.SLAVerdict`."""
        return cls(met=verdict.met, target=verdict.target, measured=verdict.measured)

    def verdict(self) -> SLAVerdict:
        """Back to the :class:`~orchestrator.sla.SLAVerdict` the CLI's tables take."""
        return SLAVerdict(met=self.met, target=self.target, measured=self.measured)


_VIEW_NAMES = {"spec_data": "spec"}
"""A :class:`JobRecord` field's name on :class:`JobView`, where they differ."""
_WIRE_NAMES = {"job_class": "class", "spec_data": "spec"}
"""A :class:`JobRecord` field's name in the API's JSON, where they differ."""


class JobView(_Body):
    """One job as stored, with its SLA verdict (``orch list -o json`` prints a list of these).

    ``spec`` is the job as submitted; the other fields are those of the store's job record.
    """

    id: str
    name: str
    team: str
    job_class: str = Field(alias="class")
    state: JobState
    gpus: int
    seq: int
    submitted_at: float
    updated_at: float
    message: str = ""
    attempts: int = 0
    by: str | None = None
    placement: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    fields: dict[str, str] = Field(default_factory=dict)
    spec: dict[str, Any]
    verdict: Verdict

    @classmethod
    def of(cls, rec: JobRecord, verdict: SLAVerdict) -> JobView:
        """The view of a stored record: every field of :class:`JobRecord`, by its name in the
        API's JSON (:data:`_WIRE_NAMES`), so a field added to the record is a field of the view
        (or an error, the view forbidding unknown fields: never silently dropped)."""
        data = {
            _WIRE_NAMES.get(f.name, f.name): getattr(rec, f.name)
            for f in dataclasses.fields(JobRecord)
        }
        return cls.model_validate({**data, "verdict": Verdict.of(verdict)})

    def record(self) -> JobRecord:
        """Back to the :class:`JobRecord` the CLI's views take (every field of it)."""
        values = {
            f.name: getattr(self, _VIEW_NAMES.get(f.name, f.name))
            for f in dataclasses.fields(JobRecord)
        }
        values["fields"] = dict(values["fields"])
        return JobRecord(**values)


class JobDetail(_Body):
    """Everything ``orch show`` prints: the job, its latest metrics, its state changes
    (``{id, event, from, message, ts}``, oldest first) and its tuning report, if tuned."""

    job: JobView
    metrics: dict[str, Any] = Field(default_factory=dict)
    events: list[dict[str, Any]] = Field(default_factory=list)
    tuning: dict[str, Any] | None = None
    profile: dict[str, Any] | None = None


class JobBatch(_Body):
    """Many jobs submitted at once: all are queued, or (one is invalid, refused by the team
    config or outside the caller's team) none is."""

    jobs: list[JobSpec] = Field(min_length=1, max_length=MAX_BATCH)


class Submitted(_Body):
    """The ids of the jobs a submission queued, in the order they were given, and what to
    tell whoever submitted them (``orch submit`` prints these in either mode): a deadline
    not checked or that cannot be met at the tuned rate, a job the scheduler's plan declines
    (it runs best effort)."""

    ids: list[str]
    warnings: list[str] = Field(default_factory=list)


class WorkingDirStored(_Body):
    """A command job's working directory, stored: the digest its jobs name."""

    digest: str


class TokenCreate(_Body):
    """A token to make: whom it speaks for, with which role, for which team."""

    name: str = Field(pattern=NAME_PATTERN, description="the principal (recorded on actions)")
    role: Role
    team: str | None = Field(
        default=None, pattern=NAME_PATTERN, description="required for a member"
    )


class TokenCreated(_Body):
    """A new token: ``token`` is shown this once (only its hash is kept)."""

    token: str
    info: TokenInfo


class WhoAmI(_Body):
    """The principal a token speaks for."""

    name: str
    role: Role
    team: str | None
    token_id: str | None


class UsageRow(_Body):
    """One job's use of the pool in the report's window: GPU-seconds held by its runs
    (tuning runs included) since the window's start, up to now for a run still going."""

    id: str
    name: str
    team: str
    job_class: str = Field(alias="class")
    state: JobState
    gpu_s: float
    submitted_at: float
    finished_at: float | None = None


class Usage(_Body):
    """``orch usage`` (a report like Slurm's ``sacct``): the jobs that held GPUs since
    ``since``, each for its use since then (a job that never ran is in no window), with each
    team's total over them, and each
    team's account since the scheduler started counting (``orch_team_gpu_seconds_total``: it
    keeps the GPU-seconds of jobs removed by ``orch gc``)."""

    since: float
    at: float
    jobs: list[UsageRow]
    teams: dict[str, float]
    accounts: dict[str, float]
