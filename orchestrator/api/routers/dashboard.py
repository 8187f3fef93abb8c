"""The web dashboard: its static page at ``/dashboard/``, and the reads it needs beyond the rest
of ``/v1``: a lean job list with SLA verdicts, a job's metrics history, and the pool's use over
time.

The page (``orchestrator/api/static/``: plain HTML, CSS and one JavaScript file, no build
step, nothing fetched from elsewhere) asks for an API token, keeps it in the tab's
``sessionStorage`` and sends it as ``Authorization: Bearer`` to ``/v1`` like any client: it
sees and may do exactly what the token's principal may (a viewer reads, a member cancels its
team's jobs, an admin any job's).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Query
from fastapi.responses import JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator.api import operations
from orchestrator.api.auth import Store, Who
from orchestrator.api.models import Verdict
from orchestrator.api.params import MAX_LIST
from orchestrator.api.routers.jobs import Ref
from orchestrator.sla import SLAVerdict, evaluate_sla
from orchestrator.spec import JobSpec
from orchestrator.store.pool_view import HISTORY_LEN
from orchestrator.store.states import TERMINAL, JobState

__all__ = ["STATIC", "JobRow", "States", "mount", "router"]

STATIC = Path(__file__).resolve().parents[1] / "static"
"""The dashboard's files."""

_MEASURES = ("samples_per_s", "tokens_per_s", "p50_ms", "p95_ms", "p99_ms")
"""The metrics an SLA verdict reads."""

_ROW_FIELDS = (
    "name",
    "team",
    "class",
    "state",
    "gpus",
    "submitted_at",
    "updated_at",
    "message",
    "finished_at",
    "spec",
)
"""The fields of a job a row is made of."""

_UNREADABLE = SLAVerdict(met=None, target="(stored spec unreadable)", measured="-")

router = APIRouter(prefix="/v1", tags=["dashboard"])


class JobRow(BaseModel):
    """One job of the dashboard's list: what a table row shows, no spec (a tenth the bytes of
    a :class:`~orchestrator.api.models.JobView`)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    id: str
    name: str
    team: str
    job_class: str = Field(alias="class")
    state: JobState
    gpus: int
    submitted_at: float
    updated_at: float
    message: str = ""
    verdict: Verdict


class States(BaseModel):
    """The job states in lifecycle order, and those a job ends in: the page spells none of
    them itself (``orchestrator.store.states`` is their one home)."""

    states: list[JobState]
    ended: list[JobState]


@router.get("/dashboard/states", response_model=States)
def states(who: Who) -> States:
    """Every job state, in lifecycle order, and the ended ones (the page's state filter, and
    whether a job's page still refreshes)."""
    return States(states=list(JobState), ended=[s for s in JobState if s in TERMINAL])


@router.get("/dashboard/jobs", response_model=list[JobRow], response_class=JSONResponse)
def job_rows(
    who: Who,
    store: Store,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST, description="The newest this many.")] = 10_000,
) -> JSONResponse:
    """The newest jobs the principal may read, newest first, each with its SLA verdict: a few
    fields of each job and the metrics its verdict reads, one round trip per batch each (the
    rows are built as :class:`JobRow` describes them, not validated again: 10,000 of them are
    one answer)."""
    if who.reads_all:
        raw = store.job_fields(_ROW_FIELDS, limit=limit)
    else:  # a member or team viewer: its team's newest
        raw = [j for j in store.job_fields(_ROW_FIELDS) if j.get("team") == who.team][-limit:]
    raw.reverse()
    measured = [j["id"] for j in raw if j.get("state") not in ("submitted", "queued")]
    metrics = store.latest_metrics(measured, _MEASURES) if measured else {}
    slas = _SlaCache()
    now = time.time()
    rows = []
    for j in raw:
        submitted = float(j.get("submitted_at", 0))
        end = _float(j.get("finished_at")) or now
        verdict = slas.evaluate(
            j.get("spec", ""),
            metrics.get(j["id"], {}),
            elapsed_s=end - submitted,
            finished=j.get("state") == JobState.FINISHED.value,
            ended=j.get("state", "")
            if j.get("state") in (JobState.CANCELLED.value, JobState.FAILED.value)
            else "",
        )
        rows.append(
            {
                "id": j["id"],
                "name": j.get("name", ""),
                "team": j.get("team", ""),
                "class": j.get("class", ""),
                "state": j.get("state", ""),
                "gpus": int(j.get("gpus", 0)),
                "submitted_at": submitted,
                "updated_at": float(j.get("updated_at", submitted)),
                "message": j.get("message", ""),
                "verdict": {
                    "met": verdict.met,
                    "target": verdict.target,
                    "measured": verdict.measured,
                },
            }
        )
    return JSONResponse(rows)


@router.get("/dashboard/pool-history")
def pool_history(
    who: Who,
    store: Store,
    count: Annotated[
        int, Query(ge=1, le=HISTORY_LEN, description="The newest this many samples.")
    ] = 360,
) -> list[dict[str, Any]]:
    """The pool's use over time, oldest first: ``{at, gpus, used, teams: {team: GPUs}}``, one
    sample per 10 s while a scheduler runs (the pool view's team use over time: every principal
    reads it, as the pool view)."""
    return store.pool_history.read(count)


@router.get("/jobs/{ref}/metrics")
def metrics_history(
    ref: Ref,
    who: Who,
    store: Store,
    count: Annotated[int, Query(ge=1, le=1000, description="The latest this many.")] = 200,
) -> list[dict[str, Any]]:
    """The job's latest metrics reports, oldest first, each with ``ts`` (seconds): what its
    p95 and throughput charts draw."""
    return store.metrics_history(operations.read_job(store, who, ref).id, count)


class _SlaCache:
    """SLA verdicts of many jobs, each distinct SLA parsed once: :func:`evaluate_sla` reads
    only a spec's ``sla``, so jobs with equal SLAs share the first one's parsed spec (parsing
    every spec would cost most of a 10,000-job listing)."""

    def __init__(self) -> None:
        self._specs: dict[str, JobSpec | None] = {}

    def evaluate(
        self,
        spec_json: str,
        metrics: dict[str, Any],
        *,
        elapsed_s: float,
        finished: bool,
        ended: str = "",
    ) -> SLAVerdict:
        try:
            data = json.loads(spec_json)
            key = json.dumps(data.get("sla"), sort_keys=True)
        except (ValueError, AttributeError):
            return _UNREADABLE
        if key not in self._specs:
            try:
                self._specs[key] = JobSpec.model_validate(data)
            except ValidationError:
                self._specs[key] = None
        spec = self._specs[key]
        if spec is None:
            return _UNREADABLE
        return evaluate_sla(spec, metrics, elapsed_s=elapsed_s, finished=finished, ended=ended)


def _float(value: object) -> float | None:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def mount(app: FastAPI) -> None:
    """Serve the dashboard's page and files at ``/dashboard/`` (``/`` leads there)."""
    app.include_router(router)
    app.mount("/dashboard", StaticFiles(directory=STATIC, html=True), name="dashboard")

    @app.get("/", include_in_schema=False)
    def home() -> RedirectResponse:
        return RedirectResponse("/dashboard/")
