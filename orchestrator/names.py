"""The rule for job, team and principal names, in a module of its own so that the CLI's option
checks read it without importing pydantic or YAML (``orch`` starts faster)."""

from __future__ import annotations

__all__ = ["NAME_PATTERN", "NAME_RULE"]

NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,62}$"
NAME_RULE = (
    "must be 1-63 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit"
)
