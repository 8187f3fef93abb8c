"""A command-mode job's working directory, packed on the submitter's machine.

``orch submit --working-dir DIR`` packs ``DIR`` into one zip (:func:`pack`), stores it in the
job store under its content digest, and names that digest in the job's
``workload.working_dir``. When the job runs, the runtime hands the zip's bytes to every rank
of the gang (through Ray's object store: ``orchestrator.runtime.workdir``), and each worker
checks them against the digest and unpacks them into a folder of the job's sandbox user alone
(``workers.workdir``), where the command runs.

Why a zip of our own rather than passing ``DIR`` to Ray directly: the submitter and the
scheduler are different processes (often different machines), so the directory must travel
with the submission; a deterministic archive (sorted names, fixed times) also gives the same
digest for the same files, so resubmitting a job stores nothing new. Why not Ray's
``runtime_env`` ``working_dir``: Ray unpacks it into a cache every job on the host can write,
and makes it the worker's current folder and import path, where a team's ``sitecustomize.py``
would run with the worker's rights.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import WorkingDirError
from workers.workdir import DEFAULT_MAX_MB, MAX_MB_ENV, archive_problem
from workers.workdir import max_bytes as _max_bytes

__all__ = [
    "DEFAULT_MAX_MB",
    "MAX_MB_ENV",
    "SKIPPED",
    "Packed",
    "WorkingDirError",
    "check_archive",
    "max_bytes",
    "pack",
]

SKIPPED = frozenset({".git", "__pycache__", ".venv", ".mypy_cache", ".pytest_cache", ".ruff_cache"})
"""Folder names never shipped: version control, caches, virtual environments."""
_EPOCH = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class Packed:
    """A packed working directory: the zip's bytes, its digest and what it holds."""

    data: bytes
    digest: str
    files: int
    size: int
    """Bytes of the files packed (before compression)."""


def pack(folder: str | Path, limit: int | None = None) -> Packed:
    """Pack ``folder`` (see the module doc): its files, less :data:`SKIPPED` folders.

    A symbolic link inside ``folder`` is packed as what it points to when that is inside
    ``folder`` too; one pointing outside is refused (it would ship, or on the host expose,
    files the submitter did not mean to send).

    Raises:
        WorkingDirError: not a folder, a link leaving it, or its files past ``limit`` bytes
            (default :func:`max_bytes`); the message names the size and the limit.
    """
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise WorkingDirError(f"--working-dir {folder}: not a folder")
    root = root.resolve()
    limit = max_bytes() if limit is None else limit
    files = _files(root)
    size = 0
    for _, path in files:
        size += path.stat().st_size
        if size > limit:
            break
    if size > limit:
        total = sum(p.stat().st_size for _, p in files)
        raise WorkingDirError(
            f"--working-dir {folder}: {total / 1e6:.1f} MB of files, over the limit of "
            f"{limit / 1e6:g} MB ({MAX_MB_ENV}); leave data out of it (read it from storage) "
            f"or skip it ({', '.join(sorted(SKIPPED))} are skipped)"
        )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, path in files:
            # at the archive's root: Ray unpacks a gcs:// package as it is (it strips a single
            # top-level folder only from packages of remote storage)
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            mode = path.stat().st_mode
            info.external_attr = ((0o755 if mode & stat.S_IXUSR else 0o644) | stat.S_IFREG) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())
    data = buffer.getvalue()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    return Packed(data=data, digest=digest, files=len(files), size=size)


def _files(root: Path) -> list[tuple[str, Path]]:
    """``(name in the archive, path)`` of every file to pack, sorted by name."""
    found: list[tuple[str, Path]] = []
    for here, dirs, names in os.walk(root, followlinks=False):
        base = Path(here)
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED)
        for d in list(dirs):
            if (base / d).is_symlink():  # os.walk does not descend into it: check and pack it
                dirs.remove(d)
                target = _inside(root, base / d)
                found += [
                    ((base / d / p.relative_to(target)).relative_to(root).as_posix(), p)
                    for p in sorted(target.rglob("*"))
                    if p.is_file()
                ]
        for n in sorted(names):
            path = base / n
            if path.is_symlink():
                path = _inside(root, path)
            if path.is_file():  # sockets, fifos: not files to ship
                found.append(((base / n).relative_to(root).as_posix(), path))
    return sorted(found)


def _inside(root: Path, link: Path) -> Path:
    target = link.resolve()
    if target != root and root not in target.parents:
        raise WorkingDirError(
            f"--working-dir: {link} is a link to {target}, outside {root}; copy what it names "
            "into the folder, or remove the link"
        )
    return target


def check_archive(data: bytes, limit: int | None = None) -> None:
    """Check a packed working directory received from elsewhere (the API): a zip whose files
    add up to at most ``limit`` bytes unpacked (default :func:`max_bytes`), none of them named
    outside the folder it unpacks into (the worker checks the same again, and the digest,
    before it unpacks: ``workers.workdir``).

    Raises:
        WorkingDirError: not a zip, too large unpacked, or a name leaving the folder.
    """
    problem = archive_problem(data, max_bytes() if limit is None else limit)
    if problem is not None:
        raise WorkingDirError(problem)


def max_bytes() -> int:
    """The size limit on a working directory's files (``workers.workdir.max_bytes``).

    Raises:
        WorkingDirError: ``ORCH_WORKING_DIR_MAX_MB`` is not a positive number.
    """
    try:
        return _max_bytes()
    except ValueError as err:
        raise WorkingDirError(str(err)) from None
