"""From a job file, or a parsed document, to a :class:`JobSpec` or a :class:`SpecError`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.errors import SpecError
from orchestrator.inputs import describe_errors, load_document
from orchestrator.spec.job import JobSpec


def parse_spec(data: Any, source: str = "<input>") -> JobSpec:
    """Validate already-parsed data (a mapping) into a :class:`JobSpec`.

    Raises:
        SpecError: one message per problem.
    """
    if data is None:  # standard input with nothing on it (a file's emptiness is said on reading)
        raise SpecError(source, ["the job is empty (or holds only comments)"])
    if not isinstance(data, dict):
        raise SpecError(source, [f"the job must be a mapping of fields, got {type(data).__name__}"])
    try:
        return JobSpec.model_validate(data)
    except ValidationError as err:
        raise SpecError(source, describe_errors(err, JobSpec)) from None


def load_spec(path: str | Path, *, working_dir: str | None = None) -> JobSpec:
    """Read a YAML (``.yaml``/``.yml``) or JSON (``.json``) job file and validate it.

    The file is read within the limits of :mod:`orchestrator.inputs` (a regular file, bounded
    size, no YAML aliases or duplicate keys, bounded nesting).

    Args:
        working_dir: the digest of the stored working directory (``orch submit
            --working-dir``): a command job's ``workload.working_dir`` becomes it.

    Raises:
        SpecError: the file is missing, not a regular file, too large, not YAML/JSON, or fails
            validation.
    """
    p = Path(path)
    if p.suffix.lower() not in {".yaml", ".yml", ".json"}:
        raise SpecError(
            str(p), [f"job files end in .yaml, .yml or .json, got {p.suffix or 'none'!r}"]
        )
    return spec_from_document(load_document(p), str(p), working_dir=working_dir)


def spec_from_document(data: Any, source: str, *, working_dir: str | None = None) -> JobSpec:
    """:func:`load_spec` of a document already read and parsed (``orch submit -``: stdin)."""
    workload = data.get("workload") if isinstance(data, dict) else None
    if working_dir is not None and isinstance(workload, dict) and "command" in workload:
        data["workload"] = {**workload, "working_dir": working_dir}
    return parse_spec(data, source)
