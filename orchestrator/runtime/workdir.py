"""A command job's working directory, from the store to Ray's cluster storage.

Ray's runtime environment gives an actor a ``working_dir``, unpacked on its host before the
actor starts, but accepts a local folder or zip only at ``ray.init`` (the driver's job); for
one actor it wants a URI. The scheduler uploads the job's zip (as the submitter stored it:
see :mod:`orchestrator.workdir`) to the cluster's own package store (GCS, the same place
``ray.init`` puts a local ``working_dir``) under a content-addressed ``gcs://`` URI, once per
content; every host of the gang then fetches and unpacks it from there. No object storage
(S3) is needed.

Why Ray's ``packaging`` module (not public API): it is the one way to put a package in GCS,
the step ``ray.init`` itself takes; the alternative, a remote URI, would make every
deployment run an object store for command jobs.
"""

from __future__ import annotations

__all__ = ["ray_working_dir"]


def ray_working_dir(redis_url: str, namespace: str, digest: str) -> str:
    """The ``gcs://`` URI of the working directory ``digest``, uploaded if the cluster does
    not hold it (Ray drops a package no actor or job has used for a while).

    Raises:
        FileNotFoundError: the store holds no working directory ``digest``.
    """
    from ray._private.runtime_env.packaging import package_exists, upload_package_to_gcs

    uri = f"gcs://_ray_pkg_{digest.removeprefix('sha256:')}.zip"
    if package_exists(uri):
        return uri
    from orchestrator.store import JobStore

    data = JobStore.from_url(redis_url, namespace).working_dirs.get(digest)
    if data is None:
        raise FileNotFoundError(f"the job's working directory {digest} is not in the store")
    upload_package_to_gcs(uri, data)
    return uri
