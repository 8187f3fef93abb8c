"""A command job's working directory, from the store to the gang's workers.

The scheduler reads the job's archive (as the submitter stored it: see
:mod:`orchestrator.workdir`) from the store and puts its bytes in Ray's object store, once per
run; every rank's :meth:`workers.actor.WorkerActor.run` receives them (Ray ships an object to
the hosts that need it), checks them against the job's digest and unpacks them into a folder
of the job's sandbox user alone (:mod:`workers.workdir`).

Why not Ray's ``runtime_env`` ``working_dir``: Ray unpacks it into a per-host cache every
job's processes can write (one team's job could change another's code there), makes it the
privileged worker's current folder and puts it on its import path (a team's
``sitecustomize.py`` or ``*.pth`` would run as the worker). Bytes handed to the run are
never a folder anyone imports from.
"""

from __future__ import annotations

from typing import Any

__all__ = ["working_dir_ref"]


def working_dir_ref(redis_url: str, namespace: str, digest: str) -> Any:
    """The archive of the working directory ``digest`` in Ray's object store (an
    ``ObjectRef``, passed to the workers' ``run``; it lives as long as the caller holds it).

    Raises:
        FileNotFoundError: the store holds no working directory ``digest``.
    """
    import ray

    from orchestrator.store import JobStore

    data = JobStore.from_url(redis_url, namespace).working_dirs.get(digest)
    if data is None:
        raise FileNotFoundError(f"the job's working directory {digest} is not in the store")
    return ray.put(data)
