"""The `orch` command line: the adapters on top of everything (STYLE.md 15).

- :mod:`~orchestrator.cli.main`: the typer app, the operator's commands and :func:`main`;
- :mod:`~orchestrator.cli.jobs`: the job commands, each written once over
- :mod:`~orchestrator.cli.backend`: the API (with a token) or the store (as a local admin);
- :mod:`~orchestrator.cli.access`: ``orch serve``, ``tokens`` and ``audit``;
- :mod:`~orchestrator.cli.views`, :mod:`~orchestrator.cli.output`: what is printed and how;
- :mod:`~orchestrator.cli.tune`, :mod:`~orchestrator.cli.demo`, :mod:`~orchestrator.cli.load`:
  ``orch tune``, ``orch demo`` and ``orch load``.

Nothing below the CLI imports it.
"""

from __future__ import annotations

from orchestrator.cli.main import app, main

__all__ = ["app", "main"]
