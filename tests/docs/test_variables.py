"""Every environment variable the package reads is documented: a setting on the generated
settings page, any other in a guide (the operator guide's "Other variables" table, mostly)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("orchestrator", "workers", "policies")
DOCS = [*sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "reference").glob("*.md"))]
INTERNAL = {
    # set by orch for a job's own process, read there by workers/job.py (its docstring says how)
    "ORCH_JOB_CONTEXT",
    "ORCH_JOB_FD",
    "ORCH_JOB_CONTROL_FD",
}


def _named_in(paths: list[Path]) -> set[str]:
    found: set[str] = set()
    for path in paths:
        found |= set(re.findall(r"""["'`]\$?(ORCH_[A-Z0-9_]+)["'`]""", path.read_text()))
    return found


def test_every_variable_the_code_reads_is_documented() -> None:
    code = _named_in([p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))])
    assert "ORCH_DATA_DIR" in code and "ORCH_CONFIG" in code  # the scan sees what it should
    documented = _named_in(DOCS)
    missing = sorted(code - INTERNAL - documented)
    assert not missing, f"read by the code, in no page of docs/: {', '.join(missing)}"
