"""A command job's working directory on the worker: the archive the team stored, checked
against its digest and unpacked into the run's private folder.

The archive reaches the worker as bytes (the runtime hands them to the run, through Ray's
object store), never as a folder some earlier process unpacked: a folder in a shared cache
could have been changed by another team's job, and a folder on a privileged process's path or
as its working directory would let the team's start-up hooks (``sitecustomize.py``, ``*.pth``)
run with the worker's rights. Here the bytes are checked (their sha256 must be the digest the
job names; no name may leave the folder; the declared size is bounded) and unpacked into a
fresh folder that the sandbox then gives to the job's uid alone (0700). The worker itself only
writes the files: it never imports from, or runs in, that folder.
"""

from __future__ import annotations

import hashlib
import io
import os
import zipfile
from pathlib import Path

from workers.errors import CommandError

__all__ = ["DEFAULT_MAX_MB", "MAX_MB_ENV", "archive_problem", "max_bytes", "unpack_verified"]

MAX_MB_ENV = "ORCH_WORKING_DIR_MAX_MB"
DEFAULT_MAX_MB = 50.0


def max_bytes() -> int:
    """The size limit on a working directory's files: ``ORCH_WORKING_DIR_MAX_MB`` megabytes
    (10^6 bytes; default 50).

    Raises:
        ValueError: the variable is not a positive number (the message names it).
    """
    text = os.environ.get(MAX_MB_ENV, "")
    if not text:
        return int(DEFAULT_MAX_MB * 1e6)
    try:
        mb = float(text)
    except ValueError:
        mb = -1.0
    if not 0 < mb < 1e6:
        raise ValueError(f"{MAX_MB_ENV} must be a number of megabytes > 0, got {text!r}")
    return int(mb * 1e6)


def archive_problem(data: bytes, limit: int) -> str | None:
    """What is wrong with a packed working directory, or ``None``: not a zip, more than
    ``limit`` bytes unpacked (as declared: what unpacking would write), or a name that leaves
    the folder it unpacks into."""
    try:
        entries = zipfile.ZipFile(io.BytesIO(data)).infolist()
    except (zipfile.BadZipFile, ValueError):
        return "the working directory must be a zip archive"
    size = sum(e.file_size for e in entries)
    if size > limit:
        return (
            f"the working directory unpacks to {size / 1e6:.1f} MB, over the limit of "
            f"{limit / 1e6:g} MB ({MAX_MB_ENV})"
        )
    for e in entries:
        parts = Path(e.filename).parts
        if e.filename.startswith("/") or ".." in parts:
            return f"the working directory names {e.filename!r}, outside it"
    return None


def unpack_verified(data: bytes, digest: str, folder: str | Path) -> None:
    """Unpack the archive ``data`` into ``folder`` (new, or empty) once its sha256 is
    ``digest`` and it passes :func:`archive_problem`; files keep their modes (an executable
    script stays one). A link in the archive is written as a plain file, never followed.

    Raises:
        CommandError: the bytes are not what the job named, or not a working directory.
    """
    actual = "sha256:" + hashlib.sha256(data).hexdigest()
    if actual != digest:
        raise CommandError(
            f"the job's working directory is not the one it names ({digest}); got {actual}"
        )
    problem = archive_problem(data, max_bytes())
    if problem is not None:
        raise CommandError(problem)
    root = Path(folder)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for entry in archive.infolist():
            path = Path(archive.extract(entry, root))
            mode = (entry.external_attr >> 16) & 0o777
            if mode and not entry.is_dir():
                path.chmod(mode & 0o755)
