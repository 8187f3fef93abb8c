"""Every process of a team's run in a cgroup of its own: a bound on its processes and its
memory while it runs, and all of them gone when it ends.

A sandboxed child (:mod:`workers.sandbox`, :mod:`workers.command`) is started by
:func:`launcher`'s function, which runs in the forked child before the team's program: it joins
the run's cgroups (while still root), leaves the host's network when the job declared none
(a network namespace of its own, with only a loopback that is down), drops to the job's uid
and asks to die with the worker. The team's code never runs with the privileges it had.

:class:`RunCgroup` is one run's cgroup in every hierarchy that has what it needs:

- cgroup v2 (the unified hierarchy): membership, ``pids.max`` / ``memory.max`` where the
  controllers are there, and ``cgroup.kill`` (Linux 5.14) to end every process at once;
- cgroup v1 ``pids`` and ``memory`` hierarchies, on hosts that keep those controllers there
  (a *hybrid* host: v2 mounted at ``/sys/fs/cgroup/unified`` with no controllers).

Each is made under the worker's own cgroup (or under ``ORCH_SANDBOX_CGROUP``, a cgroup v2 the
operator delegated to the pool), so the host's limits on the worker still hold for its jobs.
At the run's end :meth:`RunCgroup.close` kills what is left, waits until the cgroup is
empty, and removes it: a double-forked daemon of the team's is gone before the job's uid is
claimed by the next job. A job's uid, not its cgroup, is what keeps it from another's files.

The cgroup also measures the run as itself, apart from the worker and its earlier runs: the
most memory its processes held at once (:meth:`RunCgroup.memory_peak`) and whether the OOM
killer ended one of them (:meth:`RunCgroup.out_of_memory`).

Why hand-written: the design's dependencies hold no cgroup library; ``systemd-run --scope``
needs a systemd that containers and Ray nodes rarely run; what is needed is a handful of file
writes, kept here in one place.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import re
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "MEMORY_ENV",
    "PIDS_ENV",
    "Limits",
    "RunCgroup",
    "enforced",
    "launcher",
]

PIDS_ENV = "ORCH_SANDBOX_PIDS_MAX"
DEFAULT_PIDS = 4096
"""Tasks (processes and threads) a run may hold at once: torch's threads and a loader's
workers fit many times over; a fork bomb does not."""
MEMORY_ENV = "ORCH_SANDBOX_MEMORY"
"""Host memory a run may use when its job names none (``resources.memory_gb``): a size
(``8G``); default, the host's memory shared by its GPU slots."""
CGROUP_ENV = "ORCH_SANDBOX_CGROUP"
_CLONE_NEWNET = 0x40000000
_PR_SET_PDEATHSIG = 1
_SIOCSIFFLAGS = 0x8914
_LOOPBACK_UP = struct.pack("16sH14s", b"lo", 0x1 | 0x8, b"")  # IFF_UP | IFF_LOOPBACK
_names = itertools.count()


@dataclass(frozen=True)
class Limits:
    """What one run of a team's code may use.

    Attributes:
        pids: tasks at once (processes and threads).
        memory_bytes: resident memory of all its processes; ``None``: no bound of ours.
        network: whether it keeps the host's network (else: a network namespace of its own).
    """

    pids: int = DEFAULT_PIDS
    memory_bytes: int | None = None
    network: bool = False


def limits_from_env(memory_gb: float | None, network: bool, gpu_slots: int | None = None) -> Limits:
    """A run's limits: the job's memory (GB of 10^9 bytes) or the operator's default
    (:data:`MEMORY_ENV`, else the host's memory over its ``gpu_slots``), and the operator's
    process bound (:data:`PIDS_ENV`)."""
    text = os.environ.get(PIDS_ENV, "")
    pids = int(text) if text.isdigit() and int(text) > 0 else DEFAULT_PIDS
    if memory_gb is not None:
        memory: int | None = int(memory_gb * 1e9)
    else:
        memory = _size(os.environ.get(MEMORY_ENV, ""))
        if memory is None:
            total = _host_memory()
            memory = total // max(1, gpu_slots or 1) if total else None
    return Limits(pids=pids, memory_bytes=memory, network=network)


def _size(text: str) -> int | None:
    match = re.fullmatch(r"\s*(\d+)\s*([kmgt]?)i?b?\s*", text.lower())
    if not match:
        return None
    return int(match[1]) << {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}[match[2]]


def _host_memory() -> int | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return None


# -- the hierarchies ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Hierarchy:
    version: int  # 1 or 2
    controller: str  # "" for v2, "pids" or "memory" for v1
    base: Path  # where runs' cgroups are made


def _hierarchies() -> list[_Hierarchy]:
    """The places this host lets a run's cgroup live, v2 first."""
    own = _own_cgroups()
    found: list[_Hierarchy] = []
    for mount, fstype, options, root in _mounts():
        if fstype == "cgroup2":
            delegated = os.environ.get(CGROUP_ENV)
            base = Path(delegated) if delegated else mount / _relative(own.get(""), root)
            found.insert(0, _Hierarchy(2, "", base))
        elif fstype == "cgroup":
            for controller in ("pids", "memory"):
                if controller in options.split(","):
                    path = own.get(controller)
                    found.append(_Hierarchy(1, controller, mount / _relative(path, root)))
    return [h for h in found if os.access(h.base, os.W_OK)]


def _relative(path: str | None, root: str) -> str:
    path = path or "/"
    if root != "/" and path.startswith(root):
        path = path[len(root) :]
    return path.lstrip("/")


def _mounts() -> list[tuple[Path, str, str, str]]:
    """``(mount point, fs type, super options, root)`` of every cgroup mount."""
    out = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
                out.append((Path(fields[4]), tail[0], tail[2], fields[3]))
    return out


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup per controller (``""``: the v2 hierarchy)."""
    own: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                own[c] = path
    return own


# -- one run's cgroup --------------------------------------------------------------------------


class RunCgroup:
    """One run's cgroup in every usable hierarchy (see the module doc). ``None`` parts are
    what this host does not offer; :meth:`enforces` says what holds."""

    def __init__(self, name: str, limits: Limits) -> None:
        self.limits = limits
        self.dirs: list[tuple[_Hierarchy, Path]] = []
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:80]
        unique = f"orch-{safe}-{os.getpid()}-{next(_names)}"
        for h in _hierarchies():
            _sweep(h.base)
            if h.version == 2:
                # best effort: a cgroup with processes of its own cannot hand controllers down;
                # asked for with no memory bound too: the controller also keeps the run's peak
                _write(h.base / "cgroup.subtree_control", "+pids +memory")
            path = h.base / unique
            try:
                path.mkdir()
            except OSError:
                continue
            self.dirs.append((h, path))
        self._set_limits()

    def _set_limits(self) -> None:
        for h, path in self.dirs:
            if h.controller in ("", "pids"):
                _write(path / "pids.max", str(self.limits.pids))
            if self.limits.memory_bytes is not None:
                if h.version == 2:
                    _write(path / "memory.max", str(self.limits.memory_bytes))
                    _write(path / "memory.swap.max", "0")
                elif h.controller == "memory":
                    _write(path / "memory.limit_in_bytes", str(self.limits.memory_bytes))

    def enforces(self) -> dict[str, bool]:
        """What holds for this run: its ``processes`` bound, its ``memory`` bound and the
        ``cleanup`` of every process at its end."""
        files = {p.name for _, d in self.dirs for p in d.iterdir()}
        return {
            "processes": "pids.max" in files,
            "memory": bool({"memory.max", "memory.limit_in_bytes"} & files),
            "cleanup": bool(self.dirs),
        }

    def procs_files(self) -> list[bytes]:
        """The ``cgroup.procs`` files the child writes itself into (before it drops root)."""
        return [os.fsencode(d / "cgroup.procs") for _, d in self.dirs]

    def pids(self) -> set[int]:
        """The processes in the run's cgroup now."""
        out: set[int] = set()
        for _, d in self.dirs:
            with contextlib.suppress(OSError, ValueError):
                out |= {int(p) for p in (d / "cgroup.procs").read_text().split()}
        return out

    def out_of_memory(self, killed: bool = False) -> bool:
        """Whether the kernel's OOM killer killed a process of the run: the cgroup's count of
        OOM kills (v2 ``memory.events``, v1 ``memory.oom_control``; both count a kill by the
        host's OOM killer too). A v1 kernel older than 4.13 keeps no such count: there, a run
        ``killed`` by ``SIGKILL`` after its memory reached its bound (``memory.failcnt``) is
        taken as one."""
        for h, d in self.dirs:
            if h.version == 2:
                if _counter(d / "memory.events", "oom_kill"):
                    return True
            elif h.controller == "memory":
                kills = _counter(d / "memory.oom_control", "oom_kill", None)
                if kills:
                    return True
                if kills is None and killed and _read_int(d / "memory.failcnt"):
                    return True
        return False

    def memory_peak(self) -> int | None:
        """The most memory the run's processes held at once so far, in bytes, as the kernel
        charges it against their bound (their pages, page cache included): v2 ``memory.peak``
        (Linux 5.19), v1 ``memory.max_usage_in_bytes``; ``None`` where the run's cgroup has
        no memory controller. The cgroup is the run's own, made for it: no earlier run's
        peak is in it, whatever ran in the worker before."""
        peaks = [
            _read_int(d / ("memory.peak" if h.version == 2 else "memory.max_usage_in_bytes"))
            for h, d in self.dirs
            if h.version == 2 or h.controller == "memory"
        ]
        found = [p for p in peaks if p is not None]
        return max(found) if found else None

    def hit_process_bound(self) -> bool:
        """Whether a fork of the run failed on its process bound."""
        return any(_counter(d / "pids.events", "max") for _, d in self.dirs)

    def close(self, timeout_s: float = 10.0) -> bool:
        """Kill every process left in the run's cgroup, wait until it is empty, remove it.
        Returns whether it emptied (it is kept, and stays bounded, if not)."""
        for h, d in self.dirs:
            if h.version == 2 and (d / "cgroup.kill").exists():
                _write(d / "cgroup.kill", "1")
            if h.controller in ("", "pids"):
                _write(d / "pids.max", "0")  # no new process while the old ones are killed
        deadline = time.monotonic() + timeout_s
        while True:
            left = self.pids()
            if not left:
                break
            if time.monotonic() > deadline:
                return False
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)
        for _, d in self.dirs:
            for _ in range(50):  # the kernel frees an emptied cgroup a moment later
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)
        return True


def _sweep(base: Path) -> None:
    """Remove the cgroups of runs whose worker died before closing them (their name ends with
    the worker's pid), killing what is left in them."""
    for d in base.glob("orch-*"):
        _, pid, _ = d.name.rsplit("-", 2)
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            with contextlib.suppress(OSError):
                for p in (d / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):
                        os.kill(int(p), signal.SIGKILL)
            with contextlib.suppress(OSError):
                d.rmdir()  # not yet, if a process is still dying: the next sweep takes it


def _write(path: Path, text: str) -> bool:
    try:
        with open(path, "w") as fh:
            fh.write(text)
        return True
    except OSError:
        return False


def _counter(path: Path, key: str, missing: int | None = 0) -> int | None:
    """The value of ``key`` in a flat-keyed cgroup file; ``missing`` when the file or the key
    is not there."""
    with contextlib.suppress(OSError, ValueError):
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    return missing


def _read_int(path: Path) -> int | None:
    """A cgroup file holding one number (``None``: not there, or ``max``)."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


# -- the child's first steps -------------------------------------------------------------------


def launcher(uid: int | None, cgroup: RunCgroup | None, network: bool) -> Callable[[], None] | None:
    """What a team's process runs between fork and exec (``preexec_fn``), in this order: join
    ``cgroup`` (needs root), leave the host's network unless ``network`` (needs root), drop to
    ``uid`` with that gid and no other groups (when given), then ask Linux to kill it when the
    worker thread that started it dies (``PR_SET_PDEATHSIG``, set last: a change of
    credentials clears it). A failed switch of uid raises (the child never runs as root);
    the rest are what this host allows, as :func:`enforced` told at start.

    ``None`` off Linux. Everything it needs is looked up here, before the fork: the child
    only writes and calls."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    prctl, unshare = libc.prctl, libc.unshare
    procs = cgroup.procs_files() if cgroup is not None else []

    def start() -> None:
        for path in procs:
            with contextlib.suppress(OSError):
                fd = os.open(path, os.O_WRONLY)
                try:
                    os.write(fd, b"0")
                finally:
                    os.close(fd)
        if not network and unshare(_CLONE_NEWNET) == 0:
            _loopback_up()
        if uid is not None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

    return start


def _loopback_up() -> None:
    """Bring up the new network namespace's own loopback (a script's local rendezvous, a
    single-process ``torch.distributed`` group, run on it); it reaches nothing of the host's."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        fcntl.ioctl(s, _SIOCSIFFLAGS, _LOOPBACK_UP)


# -- what this host enforces -------------------------------------------------------------------


def enforced() -> dict[str, str]:
    """What this host enforces around a team's run, each ``what -> how`` or ``"not
    enforced: why"``: ``user`` (a uid of the job's own), ``processes`` and ``memory``
    (bounds), ``cleanup`` (every process gone at the end), ``network`` (none unless asked).
    Made by trying: a cgroup is made and removed, a namespace is entered by a child."""
    out: dict[str, str] = {}
    root = os.geteuid() == 0
    out["user"] = (
        "a uid per job" if root else f"not enforced: the worker runs as uid {os.geteuid()}"
    )
    probe = RunCgroup("probe", Limits(memory_bytes=1 << 40))
    try:
        has = probe.enforces()
    finally:
        probe.close(timeout_s=1.0)
    kinds = sorted({f"v{h.version}" for h, _ in probe.dirs})
    how = f"cgroup {'+'.join(kinds)}" if kinds else ""
    for what in ("processes", "memory", "cleanup"):
        out[what] = how if has[what] else "not enforced: no writable cgroup offers it here"
    out["network"] = _probe_network()
    return out


def _probe_network() -> str:
    import ctypes

    unshare = ctypes.CDLL(None, use_errno=True).unshare  # looked up before the fork
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os._exit(0 if unshare(_CLONE_NEWNET) == 0 else 1)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) == 0:
        return "a network namespace per run"
    return "not enforced: this worker cannot make a network namespace (needs root)"
