"""``python -m workers.launch SCRIPT ARGS...`` (or ``-m MODULE ARGS...``): run a command job's
script as ``python SCRIPT ARGS...`` would, with ``orch``'s step hook installed.

:mod:`workers.command` runs a job's ``[python, X, ...]`` this way, as the job's own uid. The
hook (:func:`workers.job.optimizer_stepped`, through ``torch.optim``'s global
``register_optimizer_step_post_hook``) measures a script that never calls ``job.report``: one
written for ``torchrun``, or a loop set up by ``job.prepare``. It is installed when the script
first imports ``torch.optim`` (a finder on ``sys.meta_path`` that steps aside after that one
import), not here: importing torch costs a second and hundreds of MB, which a script that does
not use it (a shell-like helper, a data tool) must not pay.

Why a launcher module, as ``python -m cProfile``, ``coverage run`` and ``python -m pdb`` do it,
and not a start-up hook: a ``sitecustomize`` is one module per interpreter (the distribution's
own, e.g. Debian's, or the team's, would hide ours or be hidden), a ``.pth`` file needs a
site-packages folder of ours on the path (the sandbox runs with ``PYTHONNOUSERSITE``), and both
would run in every Python the job starts (its DataLoader's spawned workers, its tools), while
the launcher touches exactly the process the command names. The script sees what ``python
SCRIPT`` gives it: ``sys.argv``, ``sys.path[0]`` its folder, ``__name__ == "__main__"`` and a
``__main__`` module with its ``__file__`` (multiprocessing's spawn re-imports it from there).
The worker starts it with ``python -P`` so that a folder of the team's named ``workers`` cannot
stand in for this package; the script's folder is put first on the path here instead.
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.machinery
import importlib.util
import os
import runpy
import sys
import traceback
from collections.abc import Sequence
from types import ModuleType
from typing import Any

__all__ = ["HOOKED_MODULE", "install_step_hook", "main"]

HOOKED_MODULE = "torch.optim.optimizer"
"""The module whose import installs the hook (it defines the global step hooks)."""

_installed = False
_finished = False


def _leave_process_group() -> None:
    """At exit, after the script finished cleanly: leave the ``torch.distributed`` group it
    joined and did not leave (Lightning's and the Hugging Face Trainer's DDP do not).

    Without this, Gloo's worker threads can still hold a finished collective's tensors when the
    interpreter is torn down; freeing them then takes the GIL of a dying interpreter and the
    process aborts (``terminate called without an active exception``, signal 6) after its run
    completed and saved: a finished rank reported as a crash. ``torch`` considered doing this
    itself (pytorch/pytorch#179291, not merged), so it is done here, for exactly the process the
    command names. Registered before the script runs, so it runs after the script's own exit
    handlers (which may still use the group); skipped after a failure (that exit is an error
    anyway, and a collective a failed rank left pending could block its leaving). Gloo's
    groups only: NCCL's leaving waits for its peers by design (pytorch/pytorch#141510), so a
    finished rank whose peer died would hang at exit instead of ending."""
    dist = sys.modules.get("torch.distributed")
    if not _finished or dist is None:
        return
    try:
        if dist.is_available() and dist.is_initialized() and dist.get_backend() == "gloo":
            dist.destroy_process_group()
    except Exception as err:  # the run is over; leaving the group is best effort
        print(f"orch: could not leave the process group at exit: {err}", file=sys.stderr)


def install_step_hook(module: ModuleType | None = None) -> None:
    """Register :func:`workers.job.optimizer_stepped` as a global optimizer step post-hook
    (once per process; ``module``: ``torch.optim.optimizer``, imported if not given)."""
    global _installed
    if _installed:
        return
    _installed = True
    if module is None:
        import importlib

        module = importlib.import_module(HOOKED_MODULE)
    from workers.job import optimizer_stepped

    def stepped(optimizer: Any, args: Any, kwargs: Any) -> None:
        optimizer_stepped(optimizer)

    module.register_optimizer_step_post_hook(stepped)


class _WhenImported(importlib.abc.MetaPathFinder):
    """Installs the step hook right after :data:`HOOKED_MODULE` runs, then leaves
    ``sys.meta_path``."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != HOOKED_MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)  # the other finders' answer
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            install_step_hook(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def main(argv: Sequence[str]) -> None:
    """Run ``argv`` (``SCRIPT ARGS...`` or ``-m MODULE ARGS...``) as ``python`` would."""
    if not argv:
        raise SystemExit("usage: python -m workers.launch SCRIPT [ARGS...] | -m MODULE [ARGS...]")
    if "torch.optim.optimizer" in sys.modules:
        install_step_hook(sys.modules[HOOKED_MODULE])
    else:
        sys.meta_path.insert(0, _WhenImported())
    global _finished
    atexit.register(_leave_process_group)
    try:
        if argv[0] == "-m" and len(argv) > 1:
            sys.argv = [argv[1], *argv[2:]]  # runpy sets argv[0] to the module's file
            sys.path.insert(0, os.getcwd())  # as `python -m` puts the current folder first
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            script = os.path.abspath(argv[0])
            sys.argv = list(argv)
            sys.path.insert(0, os.path.dirname(script))  # as `python SCRIPT` puts its folder first
            runpy.run_path(script, run_name="__main__")
        _finished = True
    except SystemExit as end:
        _finished = end.code in (None, 0)
        raise
    except Exception as err:
        # the traceback `python SCRIPT` prints, without this module's and runpy's frames: a
        # failed job quotes the script's last lines, which must be its own
        tb = err.__traceback__
        ours = (__file__, runpy.__file__, "<frozen runpy>")
        while tb is not None and tb.tb_frame.f_code.co_filename in ours:
            tb = tb.tb_next
        traceback.print_exception(type(err), err, tb)
        sys.exit(1)


if __name__ == "__main__":
    # run as workers.launch, not __main__: job.prepare's install_step_hook must see the flag
    # this one sets (two copies of the module would register the hook twice)
    from workers import launch

    launch.main(sys.argv[1:])
