"""A job's uid on a host: which uid a team's code runs as, lent with the job's folders while
the job runs here, and emptied of processes before another job gets it.

A uid is claimed per job on each host from ``ORCH_SANDBOX_UIDS`` (``first-last``, default
``61000-64999``, uids no account uses): every rank of the job on the host shares it, and no
other job has it at the same time. The claims live in one file under a lock. The job's local
checkpoint folder belongs to the uid while the job holds it, and goes back after; folders are
changed through directory descriptors, never following a link the team's code left there.
Used by :func:`workers.sandbox.sandbox` for every run of a team's code.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import stat
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_UIDS", "UIDS_ENV", "NoUidLeft", "chown_tree", "claim_uid"]

UIDS_ENV = "ORCH_SANDBOX_UIDS"
DEFAULT_UIDS = (61000, 64999)


class NoUidLeft(RuntimeError):
    """Every uid of the range is held by another job on this host."""


def _uid_range() -> tuple[int, int]:
    text = os.environ.get(UIDS_ENV, "")
    first, sep, last = text.partition("-")
    if sep and first.isdigit() and last.isdigit() and 0 < int(first) <= int(last):
        return int(first), int(last)
    return DEFAULT_UIDS


@contextlib.contextmanager
def claim_uid(
    job_id: str, folder: Path | None = None, registry: Path | None = None
) -> Iterator[int]:
    """The uid the job's code runs as on this host while the block runs: the same for every
    rank of the job here, and none other's at the same time. Claims live in a file under a
    lock (``/run/orch-sandbox.json`` by default); a claim whose holders all died is taken back.

    ``folder`` (the job's local checkpoint folder) belongs to that uid while any rank of the
    job on this host holds the claim (see :func:`_lend`), and after to the owner of the folder
    it is in. Every process of the uid is killed when the last holder lets go, and when a uid
    nobody holds is claimed (a killed worker's run may have left some): on a host with no
    cgroup for its runs (``workers.contain``), this is what ends a job's leftover processes.
    """
    registry = registry or Path("/run/orch-sandbox.json")
    first, last = _uid_range()
    me = os.getpid()
    with _locked(registry) as claims:
        live = {
            uid: c
            for uid, c in claims.items()
            if any(_alive(pid) for pid in c["pids"]) and c["job"] != job_id
        }
        mine = next((int(u) for u, c in claims.items() if c["job"] == job_id), None)
        if mine is None:
            size = last - first + 1
            start = zlib.crc32(job_id.encode()) % size
            for i in range(size):
                uid = first + (start + i) % size
                if str(uid) not in live:
                    mine = uid
                    break
            else:
                raise NoUidLeft(f"every sandbox uid in {first}-{last} is taken ({UIDS_ENV})")
        pids = [p for p in claims.get(str(mine), {}).get("pids", []) if _alive(p)]
        if not pids:  # nobody holds it: what a dead worker's run left behind goes first
            _kill_uid(mine)
        live[str(mine)] = {"job": job_id, "pids": [*pids, me]}
        claims.clear()
        claims.update(live)
        if folder is not None:
            _lend(folder, mine)
    try:
        yield mine
    finally:
        with _locked(registry) as claims:
            claim = claims.get(str(mine))
            if claim is not None and claim["job"] == job_id:
                pids = list(claim["pids"])
                if me in pids:  # one hold of this process (it may hold several)
                    pids.remove(me)
                claim["pids"] = [p for p in pids if _alive(p)]
                if not claim["pids"]:
                    # no process of the job outlives it here (where no cgroup ended them)
                    _kill_uid(mine)
                    del claims[str(mine)]
                    if folder is not None and folder.is_dir():
                        # back to whoever owns the jobs' folders (the control plane deletes
                        # a finished job's; on Kubernetes it is not the worker's user)
                        st = folder.parent.stat()
                        chown_tree(folder, st.st_uid, st.st_gid)


def _kill_uid(uid: int, timeout_s: float = 10.0) -> None:
    """Kill every process of ``uid`` on this host (a uid the pool lends to one job at a time)
    and wait until none is left, or ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while (left := _processes_of(uid)) and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)


def _processes_of(uid: int) -> list[int]:
    """The live processes (not zombies) whose real uid is ``uid``."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            status = Path(entry.path, "status").read_text()
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            if int(fields["Uid"].split()[0]) == uid and not fields["State"].strip().startswith("Z"):
                found.append(int(entry.name))
    return found


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[dict[str, Any]]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    with os.fdopen(fd, "r+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            claims = json.loads(fh.read() or "{}")
        except ValueError:
            claims = {}
        yield claims
        fh.seek(0)
        fh.truncate()
        fh.write(json.dumps(claims))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _lend(folder: Path, uid: int) -> None:
    """Give the job's checkpoint folder to its uid (0700: no other uid's); it goes back to the
    worker's user when the job's last rank here ends, so the next job that gets this uid cannot
    read it. Its parents that the worker's user owns get search permission for others (never
    read): the child can reach its folder by name but list nothing on the way."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    for parent in folder.parents:
        st = parent.stat()
        if not st.st_mode & 0o001 and st.st_uid == os.geteuid():  # else: the operator's layout
            os.chmod(parent, (st.st_mode & 0o7777) | 0o001)
    # the jobs' folders side by side: reachable by name, never listed (a job id is no
    # business of another team's)
    st = folder.parent.stat()
    if st.st_uid == os.geteuid() and st.st_mode & 0o044:
        os.chmod(folder.parent, (st.st_mode & 0o7733) | 0o011)
    chown_tree(folder, uid)


def chown_tree(folder: Path, uid: int, gid: int | None = None) -> None:
    """Give ``folder`` and what is in it to ``uid``, never following a link: each entry is
    changed through its folder's descriptor (``os.fwalk``), so a folder the team's code swaps
    for a link mid-walk cannot make root give away what the link points to; a file with more
    than one name (a hard link the team made to a file of someone else's) is left as it is."""
    gid = uid if gid is None else gid
    os.chown(folder, uid, gid, follow_symlinks=False)
    os.chmod(folder, 0o700)
    for _, dirs, files, top in os.fwalk(folder, follow_symlinks=False):
        for name in (*dirs, *files):
            with contextlib.suppress(FileNotFoundError):
                st = os.stat(name, dir_fd=top, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode) or st.st_nlink == 1:
                    os.chown(name, uid, gid, dir_fd=top, follow_symlinks=False)
