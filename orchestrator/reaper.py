"""Ending a local Ray instance when the process that started it dies, agents included.

When `orch up` starts its own Ray (no ``RAY_ADDRESS``) and is killed with SIGKILL, Ray's own
reaper ends the GCS server and the raylet, but the raylet's agents (``ray::DashboardAgent``,
``ray::RuntimeEnvAgent``) outlive it: measured, they were still running 15 s later
(``tests/e2e/test_orch_up_killed.py``). Ray has no option for this, so this module is a small
watcher of our own: a child process that follows the starter's process tree, and when the
starter is gone (its end of a pipe closes), ends every process of that tree still alive.

    python -m orchestrator.reaper STARTER_PID    # stdin: a pipe the starter holds open
"""

from __future__ import annotations

import select
import subprocess
import sys

import psutil

__all__ = ["start_reaper"]

POLL_S = 1.0
"""How often the tree is read again (a process started and orphaned within it is missed)."""


def start_reaper() -> subprocess.Popen[bytes]:
    """Start the watcher for this process's tree; keep the returned handle (its stdin) open
    for as long as this process lives."""
    import os

    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator.reaper", str(os.getpid())],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # not in the starter's process group: a Ctrl-C is not for it
    )


def _tree(starter: psutil.Process, me: int) -> dict[int, float]:
    """Descendants of the starter (not this watcher), with their start times."""
    out = {}
    try:
        for p in starter.children(recursive=True):
            if p.pid != me:
                try:
                    out[p.pid] = p.create_time()
                except psutil.Error:
                    continue
    except psutil.Error:
        pass
    return out


def _end(tracked: dict[int, float]) -> None:
    """Terminate, then kill, every tracked process still alive (the same process: its start
    time matches, so a recycled pid is left alone)."""
    procs = []
    for pid, created in tracked.items():
        try:
            p = psutil.Process(pid)
            if p.create_time() == created:
                p.terminate()
                procs.append(p)
        except psutil.Error:
            continue
    _, alive = psutil.wait_procs(procs, timeout=3)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            continue


def main(argv: list[str]) -> int:
    """Watch ``argv[1]``'s tree until stdin closes, then end what is left of it."""
    import os

    starter = psutil.Process(int(argv[1]))
    me = os.getpid()
    tracked: dict[int, float] = {}
    while True:
        tracked.update(_tree(starter, me))
        ready, _, _ = select.select([sys.stdin], [], [], POLL_S)
        if ready and not os.read(sys.stdin.fileno(), 4096):  # EOF: the starter is gone
            break
        if not starter.is_running():
            break
    _end(tracked)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
