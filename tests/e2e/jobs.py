"""Small job specs for the end-to-end tests (tiny MLP steps, so CPU slots finish quickly)."""

from __future__ import annotations

from typing import Any

from orchestrator.spec import JobSpec, parse_spec

RESUMED_ONCE = [
    *("submitted", "queued", "placed", "running"),
    *("queued", "placed", "running", "finished"),
]
"""The events of a job requeued once while running, then resumed to the end: it was never
started twice at the same time, and never lost."""


def state_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events that are state changes (not notes: ``config``, ``sla-violated``...)."""
    from orchestrator.store.states import JobState

    return [e for e in events if e["event"] in set(JobState)]


HOLDER: dict[str, Any] = {"name": "mlp", "args": {"pace_ms": 100}}
"""The workload of a job that only holds its GPUs for a while (a filler, an interactive job
that takes a host): the MLP sleeping 100 ms before each micro-batch (``pace_ms``), so its
ranks leave the test machine's few cores to the jobs and schedulers under test."""


def mlp_job(
    name: str,
    *,
    gpus: int | dict[str, int] = 1,
    cls: str = "bulk",
    workload: str | dict[str, Any] = "mlp",
    team: str = "e2e",
    **run: Any,
) -> JobSpec:
    """An MLP job of ``gpus`` GPUs (or a ``{"min", "max"}`` range); ``run`` sets run settings
    (steps or duration_s...)."""
    sla = (
        {"throughput": {"min_samples_per_s": 1}} if cls == "bulk" else {"latency": {"max_ms": 1000}}
    )
    return parse_spec(
        {
            "name": name,
            "team": team,
            "class": cls,
            "workload": workload,
            "sla": sla,
            "resources": {"gpus": gpus},
            "run": {"micro_batch": 8, "warmup_steps": 1, **run},
        }
    )
