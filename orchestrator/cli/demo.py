"""`orch demo`: everything up on the embedded defaults: a job tuned, the examples run (the
interactive ones arriving on a busy pool), a verdict table, the next commands."""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from orchestrator.cli.demo_clients import ServiceClients
from orchestrator.config import Settings
from orchestrator.errors import OptionError, OrchError, SpecError
from orchestrator.spec import JobSpec, load_spec

if TYPE_CHECKING:
    from orchestrator.store import JobStore
    from orchestrator.store.records import JobRecord

DEMO_SUFFIX = "demo"
EXAMPLES_HINT = (
    "the demo runs the job files of a checkout's examples/ folder (run `orch demo` in the "
    "repository's root, or give --examples FOLDER)"
)


def demo_namespace(namespace: str) -> str:
    """The demo's own namespace next to ``namespace`` (``orch`` -> ``demo``, ``team`` ->
    ``team-demo``), so clearing it never touches real jobs."""
    return DEMO_SUFFIX if namespace == Settings().namespace else f"{namespace}-{DEMO_SUFFIX}"


def load_examples(folder: Path) -> list[tuple[Path, JobSpec]]:
    """Every job file in ``folder`` (sorted), validated; all problems reported together.

    Raises:
        OptionError: the folder has no job files (as outside a checkout).
        OrchError: some are invalid.
    """
    files = sorted(p for p in folder.glob("*") if p.suffix in {".yaml", ".yml", ".json"})
    if not files:
        raise OptionError(
            "--examples", f"{folder} holds no job files (*.yaml, *.yml, *.json): {EXAMPLES_HINT}"
        )
    specs, errors = [], []
    for path in files:
        try:
            specs.append((path, load_spec(path)))
        except SpecError as err:
            errors.append(str(err))
    if errors:
        raise OrchError("invalid example files:\n" + "\n".join(errors))
    return specs


def run_demo(
    settings: Settings,
    folder: Path,
    console: Console,
    timeout_s: float = 600,
    *,
    tune_trials: int = 6,
) -> bool:
    """Run the demo; returns whether every job finished (SLA verdicts are shown, not judged).

    What the product is for, in three acts: one interactive job is tuned against its SLA in
    front of the user (its trials, the chosen config, its global batch kept); the bulk jobs
    start, then the interactive ones arrive and take the GPUs they need now (a bulk job is
    preempted when the pool is full, and resumes from its checkpoint); every job is measured
    against its SLA. The next commands to try end it.

    ``settings.namespace`` is cleared first so the table shows only this run's jobs: give the
    demo a namespace of its own (see :func:`demo_namespace`).

    Args:
        tune_trials: the tuned job's trial budget (0: tune nothing).
    """
    from orchestrator.cli.views import follow, pool_table
    from orchestrator.services import open_store, serve_in_background
    from orchestrator.store.connection import redact

    examples = load_examples(folder)
    with console.status("starting Redis..."):
        store, url = open_store(settings)
        if store.lease_holder() is not None:
            raise OrchError(
                f"a scheduler is running in namespace {settings.namespace!r} (another demo?); "
                "stop it first"
            )
        store.delete_namespace()
    examples = _tune_one(examples, store, url, console, tune_trials)
    with console.status("starting Ray and the scheduler..."):
        started = time.monotonic()
        running = serve_in_background(settings)
    embedded = f"embedded under {settings.data_dir}"
    bulk = [(p, s) for p, s in examples if s.job_class == "bulk"]
    interactive = [(p, s) for p, s in examples if s.job_class != "bulk"]
    clients = ServiceClients(store)
    followed = False
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
        ids = _submit(store, bulk, console)
        if bulk and interactive:
            with console.status("bulk jobs running to their first checkpoint..."):
                _wait_for_checkpoints(store, ids, bulk, timeout_s=min(120.0, timeout_s))
            console.print(
                "[bold]interactive jobs arrive[/]: they start now, on GPUs the bulk jobs hold "
                "if the pool is full (a preempted bulk job resumes from its checkpoint)"
            )
        ids += _submit(store, interactive, console, clients)
        read = functools.partial(_judged, store)
        records = follow(read, ids, console, timeout_s=timeout_s, alive=running.thread.is_alive)
        followed = True
        if running.errors:
            raise running.errors[0]
    finally:
        clients.close(timeout_s=60.0 if followed else 0.0)  # interrupted: no wait for them
        running.shutdown()
    return _summary(store, records, console, clients.lines())


def _summary(
    store: JobStore, records: list[JobRecord], console: Console, clients: list[str]
) -> bool:
    """The demo's last act: its preemptions, what the services' clients saw, the SLA table,
    what did not finish and the next commands; whether every job finished."""
    from orchestrator.cli.views import jobs_table
    from orchestrator.store.states import JobState

    for line in [*_preemptions(store, records), *clients]:
        console.print(line, highlight=False)
    title = "demo: measured against each job's SLA"
    console.print(jobs_table(store, records, title=title, wide=True))
    for rec in records:
        if rec.state is not JobState.FINISHED:
            console.print(f"[red]{rec.id}[/]: {rec.state.value}: {rec.message}")
    console.print(_NEXT.format(job=records[0].id if records else "JOB"))
    return all(r.state is JobState.FINISHED for r in records)


_NEXT = """[bold]next[/], with `orch up` running (it serves the API and the dashboard on :8321):
  orch submit examples/bulk-cnn.yaml --wait    a job, followed to its verdict
  orch list -o wide; orch show {job}; orch logs {job}
  orch tune examples/interactive-mlp.yaml       the tuner alone, its trials and choice
  orch load SERVICE --rate 300 --duration 30    requests to a service (with a token)
  orch usage --since 1d                          GPU-hours per team
  orch tokens create --role member --team vision   then the dashboard: http://127.0.0.1:8321/"""


def _tune_one(
    examples: list[tuple[Path, JobSpec]],
    store: JobStore,
    url: str,
    console: Console,
    trials: int,
) -> list[tuple[Path, JobSpec]]:
    """Tune the first one-GPU interactive job with a latency SLA (not a service) in front of the
    user, and submit it with the chosen config (``orch show`` shows its tuning, kept under the
    job's name as ``orch tune FILE`` keeps it)."""
    from orchestrator.cli.tune import show_tuning
    from orchestrator.tuner.service import tune_spec

    candidates = [
        i
        for i, (_, s) in enumerate(examples)
        if s.job_class == "interactive"
        and s.sla.latency is not None
        and s.serve is None
        and s.resources.gpus.upper == 1
    ]
    # a training loop first (a run of so many steps): its global batch is what the tuner keeps
    pick = min(candidates, key=lambda i: examples[i][1].run.steps is None, default=None)
    if not trials:
        pick = None
    if pick is None:
        return examples
    path, spec = examples[pick]
    budget = spec.tuning.budget.model_copy(update={"trials": trials})
    tuning = spec.tuning.model_copy(update={"enabled": True, "budget": budget})
    asked = spec
    spec = spec.model_copy(update={"tuning": tuning})
    latency = spec.sla.latency
    assert latency is not None  # picked for it
    console.print(
        f"[bold]tuning {spec.name}[/] against its SLA (p{latency.percentile} <= "
        f"{latency.max_ms:g} ms) by profiling it: up to {trials} trials..."
    )
    with console.status("profiling..."):
        report = tune_spec(spec, store, url)
    console.print(show_tuning(report.to_dict(), store.profiles.load(report.job)))
    run = asked.run
    batch = run.micro_batch * run.grad_accum * asked.gpus
    config = report.to_dict().get("config")
    chosen = (config or {}).get("global_batch")
    if chosen in (None, batch):
        console.print(
            f"its global batch ({batch}) is kept: the tuner trades micro-batch, accumulation "
            "and GPUs only among configs that learn the same"
        )
    else:  # a forward-only job learns nothing: its batch is the tuner's to choose
        console.print(f"a forward-only job: its batch ({batch} -> {chosen}) is free")
    if not report.run or not config:
        return examples  # nothing meets its SLA: it runs as its file says
    from orchestrator.runtime.harness_config import run_spec

    # submitted with the chosen config (as a job tuned when it starts runs it)
    return [*examples[:pick], (path, run_spec(asked, config)), *examples[pick + 1 :]]


def _submit(
    store: JobStore,
    jobs: list[tuple[Path, JobSpec]],
    console: Console,
    clients: ServiceClients | None = None,
) -> list[str]:
    """Submit the jobs; with ``clients``, a service among them is sent its offered load."""
    ids = []
    for path, spec in jobs:
        rec = store.submit(spec, by="demo")
        ids.append(rec.id)
        console.print(f"submitted {path.name} -> [bold]{rec.id}[/] ({spec.job_class})")
        line = clients.offer(rec.id, spec) if clients is not None else None
        if line:
            console.print(line, highlight=False)
    return ids


def _judged(store: JobStore, job_id: str) -> tuple[JobRecord, dict[str, Any]]:
    """A job and the metrics it is judged on (a service's as its ingress measured them)."""
    rec = store.get(job_id)
    return rec, store.judged_metrics(rec)


def _wait_for_checkpoints(
    store: JobStore, ids: list[str], jobs: list[tuple[Path, JobSpec]], timeout_s: float
) -> None:
    """Until every job has run past its first periodic checkpoint (or ended), or
    ``timeout_s``: a job preempted after it resumes from there."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        waiting = False
        for job_id, (_, spec) in zip(ids, jobs, strict=True):
            if store.get(job_id).terminal:
                continue
            step = float(store.metrics(job_id).get("step") or 0)
            waiting |= step <= (spec.run.checkpoint_every or 0)
        if not waiting:
            return
        time.sleep(0.2)


def _preemptions(store: JobStore, records: list[JobRecord]) -> list[str]:
    """A line per preemption the demo saw: who was stopped and why, and where it resumed."""
    lines = []
    for rec in records:
        for event in store.events(rec.id):
            message = str(event.get("message", ""))
            if not message.startswith("requeued: preempted"):
                continue
            resumed = (rec.result or {}).get("resumed_from_step")
            after = (
                f"and resumed from its checkpoint at step {resumed}"
                if resumed is not None
                else "and started over (it had no checkpoint yet)"
            )
            why = message.removeprefix("requeued: preempted").lstrip(": ") or "room"
            lines.append(f"{rec.id} ({rec.job_class}) was preempted ({why}) {after}")
    return lines


def _wait_for_pool_view(store: JobStore, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and store.pool_view.read() is None:
        time.sleep(0.2)
