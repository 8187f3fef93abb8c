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
import warnings
from collections.abc import Callable
from typing import Any

import torch.multiprocessing as mp
from torch.multiprocessing.spawn import ProcessExitedException

# Long enough for the slowest module here on a loaded 2-core CI machine (about a minute),
# short enough to fail inside each test's own 300 s limit.
DEADLINE_S = 200.0
# each of :func:`spawn_fresh`'s two tries: both fit in a test's 300 s (a run takes 25-60 s)
FIRST_TRY_S = 120.0


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


def spawn_fresh(
    fn: Callable[..., None], fresh: Callable[[], tuple[Any, ...]], nprocs: int
) -> tuple[Any, ...]:
    """:func:`spawn_ranks` on arguments from ``fresh()`` (a new output folder each time), tried
    a second time, with a warning, when a rank was aborted by the C++ runtime (SIGABRT) or the
    ranks hung past the deadline: in CI's dependency-floors run a Gloo rank now and then dies
    at the end of a run with "terminate called without an active exception" (twice on
    2026-11-26, never when the module ran alone), and the 4-rank plans module hung once in
    init_process_group (pipeline parallelism on Gloo uses batch_isend_irecv, which PyTorch
    says can hang there: pytorch#132644). Causes not found; the stacks print. Any other
    failure, or a second one, fails the test. Returns the arguments of the run that finished."""
    args = fresh()
    try:
        spawn_ranks(fn, args, nprocs, deadline_s=FIRST_TRY_S)
        return args
    except (ProcessExitedException, TimeoutError) as err:
        hung = isinstance(err, TimeoutError) or err.exit_code == 1  # the deadline's exit
        if not hung and getattr(err, "signal_name", None) != "SIGABRT":
            raise
        warnings.warn(f"ranks aborted or hung ({err}); running them once more", stacklevel=2)
    args = fresh()
    spawn_ranks(fn, args, nprocs, deadline_s=FIRST_TRY_S)
    return args
