"""Spawned ranks with a deadline, for the tests that run several Gloo ranks.

``torch.multiprocessing.spawn`` waits for its ranks without end, and its children are not
daemonic: a rank that hangs keeps the test waiting past pytest-timeout, and then keeps the
test process itself alive at exit (multiprocessing joins its children), holding CI's output open
until CI's own limit. Here each rank prints its Python stack and exits when the deadline
passes (``faulthandler``), and whatever is still alive after it is killed, so a hang fails
the test in minutes with the ranks' stacks in its captured stderr.
"""

from __future__ import annotations

import faulthandler
import time
from collections.abc import Callable
from typing import Any

import torch.multiprocessing as mp

# Long enough for the slowest module here on a loaded 2-core CI machine (about a minute),
# short enough to fail inside each test's own 300 s limit.
DEADLINE_S = 200.0


def _traced(rank: int, fn: Callable[..., None], deadline_s: float, *args: Any) -> None:
    faulthandler.dump_traceback_later(deadline_s, exit=True)
    fn(rank, *args)


def spawn_ranks(
    fn: Callable[..., None], args: tuple[Any, ...], nprocs: int, deadline_s: float = DEADLINE_S
) -> None:
    """Run ``fn(rank, *args)`` in ``nprocs`` spawned processes; raise if one fails or the
    deadline passes, and leave no rank behind either way."""
    context = mp.start_processes(
        _traced, args=(fn, deadline_s, *args), nprocs=nprocs, join=False, start_method="spawn"
    )
    # the ranks exit themselves at the deadline; a rank stuck below Python (a C++ destructor
    # at exit) does not, so the parent stops waiting a little later
    give_up = time.monotonic() + deadline_s + 15.0
    try:
        while not context.join(timeout=1.0):
            if time.monotonic() > give_up:
                alive = [i for i, p in enumerate(context.processes) if p.is_alive()]
                raise TimeoutError(f"ranks {alive} still running after {deadline_s + 15:.0f} s")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
            process.join(timeout=10)
