"""`orch demo`: everything up on the embedded defaults, the examples run, a verdict table."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from orchestrator.config import Settings
from orchestrator.errors import OrchError, SpecError
from orchestrator.spec import JobSpec, load_spec

if TYPE_CHECKING:
    from orchestrator.store import JobStore

DEMO_SUFFIX = "demo"


def demo_namespace(namespace: str) -> str:
    """The demo's own namespace next to ``namespace`` (``orch`` -> ``demo``, ``team`` ->
    ``team-demo``), so clearing it never touches real jobs."""
    return DEMO_SUFFIX if namespace == Settings().namespace else f"{namespace}-{DEMO_SUFFIX}"


def load_examples(folder: Path) -> list[tuple[Path, JobSpec]]:
    """Every job file in ``folder`` (sorted), validated; all problems reported together.

    Raises:
        OrchError: the folder has no job files, or some are invalid.
    """
    files = sorted(p for p in folder.glob("*") if p.suffix in {".yaml", ".yml", ".json"})
    if not files:
        raise OrchError(f"no job files (*.yaml, *.yml, *.json) in {folder}")
    specs, errors = [], []
    for path in files:
        try:
            specs.append((path, load_spec(path)))
        except SpecError as err:
            errors.append(str(err))
    if errors:
        raise OrchError("invalid example files:\n" + "\n".join(errors))
    return specs


def run_demo(settings: Settings, folder: Path, console: Console, timeout_s: float = 600) -> bool:
    """Run the demo; returns whether every job finished (SLA verdicts are shown, not judged).

    ``settings.namespace`` is cleared first so the table shows only this run's jobs: give the
    demo a namespace of its own (see :func:`demo_namespace`).
    """
    from orchestrator.services import open_store, serve_in_background
    from orchestrator.store.connection import redact
    from orchestrator.store.states import JobState
    from orchestrator.views import follow, jobs_table, pool_table

    examples = load_examples(folder)
    with console.status("starting Redis and Ray..."):
        store, _ = open_store(settings)
        if store.lease_holder() is not None:
            raise OrchError(
                f"a scheduler is running in namespace {settings.namespace!r} (another demo?); "
                "stop it first"
            )
        store.delete_namespace()
        started = time.monotonic()
        running = serve_in_background(settings)
    embedded = f"embedded under {settings.data_dir}"
    try:
        console.print(
            f"pool up in {time.monotonic() - started:.1f} s: Redis "
            f"{redact(settings.redis_url) if settings.redis_url else embedded}, "
            f"Ray {settings.ray_address or 'local'}"
        )
        _wait_for_pool_view(store)
        view = store.pool_view.read()
        if view is not None:
            console.print(pool_table(view))
        ids = []
        for path, spec in examples:
            rec = store.submit(spec, by="demo")
            ids.append(rec.id)
            console.print(f"submitted {path.name} -> [bold]{rec.id}[/] ({spec.job_class})")
        records = follow(store, ids, console, timeout_s=timeout_s, alive=running.thread.is_alive)
        if running.errors:
            raise running.errors[0]
    finally:
        running.shutdown()
    console.print(jobs_table(store, records, title="demo: measured against each job's SLA"))
    for rec in records:
        if rec.state is not JobState.FINISHED:
            console.print(f"[red]{rec.id}[/]: {rec.state.value}: {rec.message}")
    return all(r.state is JobState.FINISHED for r in records)


def _wait_for_pool_view(store: JobStore, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and store.pool_view.read() is None:
        time.sleep(0.2)
