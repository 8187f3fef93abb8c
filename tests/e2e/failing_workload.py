"""A user workload whose builder fails, to show a failure reaches the user."""

from __future__ import annotations

from typing import Any, NoReturn


def build(args: dict[str, Any], seed: int) -> NoReturn:
    """Always fails, as a user's broken workload would."""
    raise RuntimeError("synthetic failure in the user's workload")
