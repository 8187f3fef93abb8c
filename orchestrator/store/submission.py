"""Submitting jobs: the admission checks (team config, working directory, GPU memory), the
jobs' dependencies, then one script per job that writes it whole (record, queue entry, events)
or not at all, under a fresh id while its id is taken.

:class:`JobSubmission` is a collaborator of :class:`~orchestrator.store.jobs.JobStore`, which
owns one and exposes it as ``JobStore.submit`` and its batch forms: what submission reads of
the store (the team config, names resolved to ids) and the stores it uses (profiles, pool view,
working directories, wake channel) are handed to it, so this module imports nothing back. The
job keys' caps and the scripts' reply format (:data:`EVENTS_MAXLEN`, :data:`BATCH`,
:func:`pairs`) are here because the submit script is where a job's keys are first written; the
job store reads them from here.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterable, Sequence
from importlib import resources
from typing import Any, Protocol

import redis

from orchestrator.elastic import gpu_range
from orchestrator.errors import SpecError, StoreError
from orchestrator.sla import work_seconds
from orchestrator.spec import JobSpec
from orchestrator.store.dependencies import DependencyReads, new_id, plan_ids
from orchestrator.store.keys import Keys
from orchestrator.store.pool_view import PoolViewStore, pool_problem, pool_snapshot
from orchestrator.store.records import JobRecord
from orchestrator.store.tuning import ProfileStore
from orchestrator.store.wake import WakeChannel
from orchestrator.store.workdirs import WorkingDirStore
from orchestrator.teams import TeamConfig, entry_problem

__all__ = ["BATCH", "EVENTS_MAXLEN", "JobSubmission", "SubmissionReads", "pairs"]

EVENTS_MAXLEN = 1000
"""Approximate cap of a job's event stream (a job requeued forever must not grow it forever)."""

BATCH = 500
"""Jobs per pipelined round trip."""

_SUBMIT_LUA = (
    resources.files("orchestrator.store").joinpath("submit.lua").read_text(encoding="utf-8")
)
_ID_TRIES = 16


class SubmissionReads(DependencyReads, Protocol):
    """What submission reads of the job store: the team config, and what resolving
    dependencies reads (:class:`~orchestrator.store.dependencies.DependencyReads`)."""

    def teams(self) -> TeamConfig | None: ...


class JobSubmission:
    """Submission of jobs (see the module doc).

    Args:
        client: a Redis client created with ``decode_responses=True`` (see ``connect``).
        keys: the namespace's key layout.
        jobs: the job store's reads submission needs (the team config, names to ids).
        profiles: the tuner's profiles (a job's work estimate).
        pool_view: the pool view the scheduler last published (GPU memory admission).
        working_dirs: command jobs' stored working directories.
        wake: the wake channel the submit script publishes on.
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        *,
        jobs: SubmissionReads,
        profiles: ProfileStore,
        pool_view: PoolViewStore,
        working_dirs: WorkingDirStore,
        wake: WakeChannel,
    ) -> None:
        self.client = client
        self.keys = keys
        self.jobs = jobs
        self.profiles = profiles
        self.pool_view = pool_view
        self.working_dirs = working_dirs
        self.wake = wake
        self._submit = client.register_script(_SUBMIT_LUA)

    def check_admission(self, specs: Iterable[JobSpec]) -> None:
        """Refuse jobs the team config forbids, or whose GPU memory no node of the pool the
        scheduler last published has (none published: the job waits, saying so), before any
        is written.

        Raises:
            SpecError: one line per refused job, naming the field and what is allowed.
        """
        self._check_admission(builtins.list(specs), self.jobs.teams())

    def _check_admission(self, specs: Sequence[JobSpec], config: TeamConfig | None) -> None:
        """:meth:`check_admission` under the team config ``config`` (read by the caller)."""
        problems = [
            f"job {spec.name!r}: {problem}"
            for spec in specs
            if spec.workload.entry is not None
            and (problem := entry_problem(config, spec.team, spec.workload.entry))
        ]
        problems += [
            f"job {spec.name!r}: workload.working_dir {digest} is not stored: submit with "
            "orch submit --working-dir DIR"
            for spec in specs
            if (digest := spec.workload.working_dir) is not None
            and not self.working_dirs.exists(digest)
        ]
        if config is not None:
            problems += [
                f"job {spec.name!r}: {problem}"
                for spec in specs
                for problem in config.admission_problems(spec.team, spec.resources.gpus.min)
            ]
        if problems:
            raise SpecError("team config", problems)
        # memory and kinds; in a pool of several kinds, a gang's size (one GPU fits any kind)
        if any(spec.resources.restricted or spec.resources.gpus.min > 1 for spec in specs):
            # the pool with the nodes gone from it lately: one restarting is still the pool's
            view = self.pool_view.read() or {}
            pool = pool_snapshot([*(view.get("nodes") or []), *(view.get("absent_nodes") or [])])
            problems = [
                f"job {spec.name!r}: {problem}"
                for spec in specs
                if (problem := pool_problem(spec, pool))
            ]
            if problems:
                raise SpecError("pool", problems)

    def submit(self, spec: JobSpec, *, by: str | None = None) -> JobRecord:
        """Store a new job, queued in its class's FIFO queue, with events submitted and queued.

        Args:
            spec: the validated job.
            by: who submitted it (a user name), recorded on the job and its first event.

        Returns:
            The stored record; its id is ``{spec.name}-{6 hex digits}``.

        Raises:
            SpecError: the team config refuses the job (nothing is written).
        """
        self.check_admission([spec])
        ((job_id, after),) = plan_ids(self.jobs, [spec])
        (work,) = self.work_estimates([spec])
        return self._submit_one(spec, by, job_id, after, work)

    def _submit_one(
        self, spec: JobSpec, by: str | None, job_id: str, after: str, work: float | None
    ) -> JobRecord:
        """Write one job under ``job_id``, or under a fresh id while it is taken."""
        for _ in range(_ID_TRIES):
            reply = self._submit(**self._submit_args(spec, by, job_id, after, work))
            if reply[0] == "ok":
                return JobRecord.from_hash(pairs(reply[1]))
            job_id = new_id(spec)
        raise StoreError(f"no free job id for {spec.name!r} after {_ID_TRIES} tries")

    def submit_many(self, specs: Iterable[JobSpec], *, by: str | None = None) -> builtins.list[str]:
        """Submit many jobs in one round trip per batch (each still atomic on its own).

        Returns:
            The new job ids, in the order of ``specs``.

        Raises:
            SpecError: the team config refuses one of the jobs, or a dependency is wrong
                (none is written).
        """
        specs = builtins.list(specs)
        self.check_admission(specs)
        planned = plan_ids(self.jobs, specs)
        ids: builtins.list[str] = []
        for start in range(0, len(specs), BATCH):
            batch = builtins.list(zip(specs[start : start + BATCH], planned[start:], strict=False))
            pipe = self.client.pipeline(transaction=False)
            works = self.work_estimates([spec for spec, _ in batch])
            for (spec, (job_id, after)), work in zip(batch, works, strict=True):
                self._submit(**self._submit_args(spec, by, job_id, after, work), client=pipe)
            for (spec, (_, after)), work, reply in zip(batch, works, pipe.execute(), strict=True):
                # An id already taken (1 in 16 million per name): retry that one on its own.
                ids.append(
                    pairs(reply[1])["id"]
                    if reply[0] == "ok"
                    else self._submit_one(spec, by, new_id(spec), after, work).id
                )
        return ids

    def submit_each(
        self, specs: Sequence[JobSpec], bys: Sequence[str]
    ) -> builtins.list[str | SpecError]:
        """Submit jobs each on its own, as :meth:`submit` would one after another (``bys[i]``
        submits ``specs[i]``), in a few round trips for them all: the team config read once,
        the scripts sent in one pipeline. A job refused (its team's config, its working
        directory, its GPU memory, a dependency) gets its :class:`SpecError` in its place;
        the others are written all the same.

        Returns:
            Each job's new id, or why it was refused (nothing of it written), in order.
        """
        config = self.jobs.teams()
        outcomes: builtins.list[str | SpecError] = []
        planned: builtins.list[tuple[int, str, str]] = []
        for index, spec in enumerate(specs):
            try:
                self._check_admission([spec], config)
                ((job_id, after),) = plan_ids(self.jobs, [spec])
            except SpecError as err:
                outcomes.append(err)
                continue
            outcomes.append("")
            planned.append((index, job_id, after))
        works = self.work_estimates([specs[i] for i, _, _ in planned])
        pipe = self.client.pipeline(transaction=False)
        for (i, job_id, after), work in zip(planned, works, strict=True):
            self._submit(**self._submit_args(specs[i], bys[i], job_id, after, work), client=pipe)
        replies = pipe.execute() if planned else []
        for (i, _, after), work, reply in zip(planned, works, replies, strict=True):
            # An id already taken (1 in 16 million per name): that one again on its own.
            outcomes[i] = (
                pairs(reply[1])["id"]
                if reply[0] == "ok"
                else self._submit_one(specs[i], bys[i], new_id(specs[i]), after, work).id
            )
        return outcomes

    def work_estimates(self, specs: Sequence[JobSpec]) -> builtins.list[float | None]:
        """Each job's seconds of work on its requested GPUs from its spec and the profile
        tuned under its name (:func:`~orchestrator.sla.work_seconds`): stored at submission
        as its ``remaining_s`` until a run measures it, so that a deadline job is planned
        from its submission on, live as in the simulator. One ``MGET`` for the profiles."""
        wanted = [s.name for s in specs if s.job_class == "bulk" and s.run.duration_s is None]
        profiles = self.profiles.load_many(wanted)
        return [work_seconds(s, profiles.get(s.name)) for s in specs]

    def _submit_args(
        self, spec: JobSpec, by: str | None, job_id: str, after: str, work: float | None
    ) -> dict[str, Any]:
        """The submit script's keys and arguments for a new job ``job_id`` that starts after
        the jobs ``after`` (comma-separated ids, "" if none), with ``work`` seconds of work
        (``None``: unknown)."""
        spec_json = json.dumps(
            spec.model_dump(mode="json", by_alias=True), separators=(",", ":"), sort_keys=True
        )
        k = self.keys
        return {
            "keys": [
                k.seq,
                k.job(job_id),
                k.jobs,
                k.queue(spec.job_class),
                k.events(job_id),
                k.names(spec.name),
                k.queue_version,
            ],
            "args": [
                job_id,
                spec.name,
                spec.team,
                spec.job_class,
                spec_json,
                spec.gpus,
                by or "",
                EVENTS_MAXLEN,
                *gpu_range(spec),
                *_targets(spec),
                self.wake.channel,
                _gpu_memory(spec),
                after,
                "" if work is None else repr(work),
                " ".join(spec.resources.gpu_kinds),
                " ".join(spec.resources.exclude_gpu_kinds),
                _ceiling(spec),
            ],
        }


def _targets(spec: JobSpec) -> tuple[str, str]:
    """The job's deadline and start-wait target, in seconds after submission ("": none)."""
    tp, lat = spec.sla.throughput, spec.sla.latency
    deadline = tp.deadline_s if tp is not None and spec.job_class == "bulk" else None
    wait = lat.start_within_s if lat is not None and spec.job_class == "interactive" else None
    return ("" if deadline is None else f"{deadline:g}", "" if wait is None else f"{wait:g}")


def _ceiling(spec: JobSpec) -> str:
    """An interactive job's latency ceiling as ``"PERCENTILE MS"`` ("": none), which the
    kind it needs is judged by (``orchestrator.kinds.min_speed``)."""
    lat = spec.sla.latency
    if lat is None or spec.job_class != "interactive":
        return ""
    return f"{lat.percentile} {lat.max_ms!r}"


def _gpu_memory(spec: JobSpec) -> str:
    """GB each of the job's GPUs must have ("": any), as the snapshot reads it back."""
    gb = spec.resources.gpu_memory_gb
    return "" if gb is None else repr(float(gb))


def pairs(flat: list[str]) -> dict[str, str]:
    """A flattened ``HGETALL`` reply (as a script returns it) as a dict."""
    return dict(zip(flat[::2], flat[1::2], strict=True))
