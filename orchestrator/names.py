"""The rule for job, team and principal names, in a module of its own so that the CLI's option
checks read it without importing pydantic or YAML (``orch`` starts faster)."""

from __future__ import annotations

__all__ = ["NAME_PATTERN", "NAME_RULE", "PATTERN_RULES", "ruled"]

PATTERN_RULES: dict[str, str] = {}
"""Each input pattern in words, by the pattern (``orchestrator.inputs.describe_errors`` says
these instead of the regex): filled where each pattern is defined, by :func:`ruled`."""


def ruled(pattern: str, rule: str) -> str:
    """``pattern``, its ``rule`` in words ("must be ...") kept for the error messages."""
    PATTERN_RULES[pattern] = rule
    return pattern


NAME_RULE = (
    "must be 1-63 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit"
)
NAME_PATTERN = ruled(r"^[a-z0-9][a-z0-9._-]{0,62}$", NAME_RULE)
