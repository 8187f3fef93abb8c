"""``serve.from_job``: a service serving what a finished job of its team trained.

One rule, read where a service is submitted (a refusal before anything is written) and where
it is launched (the job may have been removed since): the named job is of the service's team
(another team's is not found, as a missing one), finished, of the built-in workload the
service's ``infer`` model names (``gpt`` or ``mlp``) with the same model arguments; the
service then loads that job's final checkpoint (``workers.serve_run.load_weights``). Only
built-in workloads: their checkpoints are written by the pool's own code, so the worker that
reads them (as the operator's user) reads nothing a team's process wrote.
"""

from __future__ import annotations

from typing import Any

from orchestrator.errors import AmbiguousJob, JobNotFound, SpecError
from orchestrator.spec import JobSpec
from orchestrator.storage import StorageLocation
from orchestrator.store import JobStore
from orchestrator.store.states import JobState

__all__ = ["SERVABLE", "trained_weights"]

SERVABLE = ("gpt", "mlp")
"""The built-in workloads whose checkpoints ``infer`` serves (as its ``model``)."""


def trained_weights(
    store: JobStore, spec: JobSpec, checkpoint_root: StorageLocation | None = None
) -> dict[str, Any] | None:
    """What a service with ``serve.from_job`` loads: the trained job's checkpoint location
    (under ``checkpoint_root``, the scheduler's; ``None``: only checked), workload and
    arguments; ``None`` for a spec without ``from_job``.

    Raises:
        SpecError: the named job is not one this service may serve (the message says why).
    """
    serve = spec.serve
    if serve is None or serve.from_job is None:
        return None
    field = "serve.from_job"
    if spec.workload.ref != "infer":
        raise SpecError(
            field,
            [f"a service serving a job's checkpoint is workload infer, got {spec.workload.ref!r}"],
        )
    args = dict(spec.workload.args)
    model = args.pop("model", "gpt")
    if model not in SERVABLE:
        raise SpecError(
            field, [f"infer's model must be one of {', '.join(SERVABLE)}, got {model!r}"]
        )
    try:
        rec = store.get(store.resolve(serve.from_job))
    except (JobNotFound, AmbiguousJob):
        rec = None
    if rec is None or rec.team != spec.team:
        raise SpecError(field, [f"no job {serve.from_job!r} of team {spec.team!r}"])
    if rec.state is not JobState.FINISHED:
        raise SpecError(
            field, [f"job {rec.id} is {rec.state.value}: a service serves a finished job's model"]
        )
    trained = rec.spec.workload
    if trained.ref != model or dict(trained.args) != args:
        raise SpecError(
            field,
            [
                f"job {rec.id} trained {trained.ref} {dict(trained.args)}; this service's model "
                f"is {model} {args}: give infer the same model and arguments"
            ],
        )
    location = None if checkpoint_root is None else str(checkpoint_root / rec.id)
    return {
        "location": location,
        "workload": trained.ref,
        "workload_args": dict(trained.args),
        "job": rec.id,
    }
