"""The peak memory of one run of a team's program, measured as itself.

A worker runs many runs of teams' programs (a tuner's trials one after another, a job's runs
on a warm worker), each in processes of its own. What the worker's own process can read about
its children, ``getrusage(RUSAGE_CHILDREN)``, is the largest child it ever reaped: a 330 MB
trial after a 1.5 GB one read 1.5 GB. :class:`RunMemory` reads the run's own figure instead:

- its cgroup's peak (:meth:`workers.contain.RunCgroup.memory_peak`) where the host gives the
  run a memory controller: exact (every page the kernel charged to any process of the run,
  however short-lived, its page cache included, which is also what its memory bound counts);
- else the memory of its process tree, sampled while it runs (:meth:`RunMemory.sample`): the
  processes of its cgroup, or without one those of its session (the script is started in a
  session of its own), each counted by its proportional set size (shared pages split between
  the processes sharing them, so a loader's forked workers do not count the parent's pages
  again), and never below the script's own resident high-water mark. A peak shorter than the
  sampling interval in a process other than the script can be missed.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workers.contain import RunCgroup

__all__ = ["RunMemory"]

SAMPLE_EVERY_S = 0.1
"""How often :meth:`RunMemory.sample` reads the process tree (a no-op in between)."""
_PAGE = os.sysconf("SC_PAGE_SIZE")


class RunMemory:
    """The peak memory of the run whose first process is ``pid`` (see the module doc).

    Args:
        cgroup: the run's cgroup (``None`` where the host offers none).
        pid: the run's first process (the script), the leader of its session.
    """

    def __init__(self, cgroup: RunCgroup | None, pid: int) -> None:
        self.cgroup = cgroup
        self.pid = pid
        self.exact = cgroup is not None and cgroup.memory_peak() is not None
        self.sampled = 0  # bytes: the most the tree held at one sample
        self.last = -float("inf")

    def sample(self) -> None:
        """Read the tree's memory now, where the cgroup keeps no peak (at most every
        :data:`SAMPLE_EVERY_S`; call it often while the run lives)."""
        now = time.monotonic()
        if self.exact or now - self.last < SAMPLE_EVERY_S:
            return
        self.last = now
        pids = self.cgroup.pids() if self.cgroup is not None else _session(self.pid)
        held = sum(_proportional(p) for p in pids | {self.pid})
        self.sampled = max(self.sampled, held, _high_water(self.pid))

    def peak_mb(self) -> float:
        """The run's peak so far, in MiB."""
        if self.cgroup is not None:
            peak = self.cgroup.memory_peak()
            if peak is not None:
                return peak / 2**20
        self.sample()
        return self.sampled / 2**20


def _session(leader: int) -> set[int]:
    """The processes of the session ``leader`` leads (``/proc/PID/stat``'s sixth field)."""
    out: set[int] = set()
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = Path(entry.path, "stat").read_text()
                # after the command's name (in parentheses, which may hold anything):
                # state, ppid, pgrp, session
                if int(stat[stat.rindex(")") + 2 :].split()[3]) == leader:
                    out.add(int(entry.name))
    return out


def _proportional(pid: int) -> int:
    """``pid``'s proportional set size in bytes (its resident set where the kernel gives no
    ``smaps_rollup``); 0 for a process gone."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
    return 0


def _high_water(pid: int) -> int:
    """``pid``'s resident high-water mark (``VmHWM``) in bytes; 0 once it is gone."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0
