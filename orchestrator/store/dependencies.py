"""Job dependencies at submission: ``depends_on`` resolved to job ids, before anything is written.

A job's ``depends_on`` names jobs it starts after: a job id, or a name. A name is first an
earlier job of the same submission (``orch submit prep.yaml train.yaml`` where train names
``prep``: the ids are drawn before any job is written, so a later job can name an earlier one),
else one stored job of the submitting team. Jobs of other teams are not told apart from jobs
that do not exist (a team must not learn another's job ids). A dependency that already failed
or was cancelled is refused: the job could never start. The resolved ids are written with the
job (its ``after`` field), and the control loop holds it queued until they have all finished
(:mod:`orchestrator.control.dependencies`).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, cast

from orchestrator.errors import AmbiguousJob, JobNotFound, SpecError
from orchestrator.spec import JobSpec

if TYPE_CHECKING:
    import redis

    from orchestrator.store.keys import Keys


class DependencyReads(Protocol):
    """What resolving dependencies reads of the job store (``store.jobs.JobStore``, handed
    in by its submission, ``store.submission``: a protocol, not an import back)."""

    client: redis.Redis
    keys: Keys

    def resolve(self, ref: str) -> str: ...


__all__ = ["NEVER", "DependencyReads", "new_id", "plan_ids"]

NEVER = frozenset({"failed", "cancelled"})
"""States of a dependency that mean the job depending on it will never start."""


def new_id(spec: JobSpec) -> str:
    """A fresh job id for ``spec``: ``{name}-{6 hex digits}``."""
    return f"{spec.name}-{secrets.token_hex(3)}"


def plan_ids(store: DependencyReads, specs: Sequence[JobSpec]) -> list[tuple[str, str]]:
    """Each job's id and its dependencies' ids (comma-separated, "" if none), in order.

    Raises:
        SpecError: a dependency that is unknown, ambiguous, another team's, or will never
            finish (one line per problem; nothing is written).
    """
    ids = [new_id(spec) for spec in specs]
    if not any(spec.depends_on for spec in specs):
        return [(job_id, "") for job_id in ids]
    ids = _unused(store, specs, ids)  # a later job names these before they are written
    problems: list[str] = []
    earlier: dict[str, str] = {}
    planned = []
    for i, (spec, job_id) in enumerate(zip(specs, ids, strict=True)):
        after = []
        for ref in spec.depends_on:
            dep = earlier.get(ref) or _stored(store, spec, ref, problems)
            later = [s.name for s in specs[i + 1 :]]
            if dep is None and ref in later:  # say why instead of "no job"
                problems[-1] = _forward(specs, spec.name, ref)
            after.append(dep)
        planned.append((job_id, ",".join(a for a in after if a)))
        earlier[spec.name] = job_id
    if problems:
        raise SpecError("depends_on", problems)
    return planned


def _forward(specs: Sequence[JobSpec], name: str, ref: str) -> str:
    """The problem of job ``name`` naming ``ref``, a later job of the same submission (and no
    stored one): a cycle when ``ref`` leads back to it through the submission's
    ``depends_on``, else the order (a job names earlier ones only)."""
    needs: dict[str, set[str]] = {}
    for spec in specs:
        needs.setdefault(spec.name, set()).update(spec.depends_on)
    path = [name, ref]
    seen = {ref}

    def back(at: str) -> bool:  # depth-first: does ``at`` lead back to ``name``?
        for nxt in sorted(needs.get(at, ())):
            if nxt == name:
                path.append(nxt)
                return True
            if nxt in needs and nxt not in seen:
                seen.add(nxt)
                path.append(nxt)
                if back(nxt):
                    return True
                path.pop()
        return False

    if back(ref):
        return f"depends_on forms a cycle: {' -> '.join(path)} (each waits for the next)"
    return (
        f"job {name!r}: depends_on {ref!r}: {ref!r} comes later in this submission; give it "
        f"before {name!r} (a job names only earlier jobs of its submission)"
    )


def _unused(store: DependencyReads, specs: Sequence[JobSpec], ids: list[str]) -> list[str]:
    """``ids`` with any already taken drawn again (1 in 16 million per name)."""
    while True:
        pipe = store.client.pipeline(transaction=False)
        for job_id in ids:
            pipe.exists(store.keys.job(job_id))
        taken = [i for i, n in enumerate(pipe.execute()) if n]
        if not taken and len(set(ids)) == len(ids):
            return ids
        for i in taken or range(len(ids)):
            ids[i] = new_id(specs[i])


def _stored(store: DependencyReads, spec: JobSpec, ref: str, problems: list[str]) -> str | None:
    """The id of the stored job of ``spec``'s team that ``ref`` names (``None``: a problem)."""
    where = f"job {spec.name!r}: depends_on {ref!r}"
    try:
        candidates = [store.resolve(ref)]
    except JobNotFound:
        candidates = []
    except AmbiguousJob as err:
        candidates = err.matches
    fields = [store.client.hmget(store.keys.job(c), ("team", "state")) for c in candidates]
    mine = [
        (c, cast(str, f[1])) for c, f in zip(candidates, fields, strict=True) if f[0] == spec.team
    ]
    if not mine:
        problems.append(f"{where}: no job of team {spec.team!r} has this id or name")
        return None
    if len(mine) > 1:
        problems.append(
            f"{where}: {len(mine)} jobs have this name ({', '.join(c for c, _ in mine)}); "
            "give the id"
        )
        return None
    dep, state = mine[0]
    if state in NEVER:
        problems.append(f"{where}: {dep} {state}, so this job could never start")
        return None
    return dep
