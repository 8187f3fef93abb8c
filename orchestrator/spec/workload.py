"""What a job runs (``workload:``): a built-in workload, a user entry point, or a command with
its own settings."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import Field, field_validator, model_validator

from orchestrator.names import ruled
from orchestrator.spec.base import MAX_SECONDS, SpecModel
from workers.errors import WorkloadError
from workers.workloads.registry import BUILTIN_WORKLOADS

ENTRY_PATTERN = ruled(
    r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$", "must be an entry point 'package.module:function'"
)
DIGEST_PATTERN = ruled(
    r"^sha256:[0-9a-f]{64}$",
    "must be a stored working directory's digest 'sha256:<64 hex>' (orch submit --working-dir "
    "sets it)",
)
PYTHONS = ("python", "python3")
SettingName = Annotated[
    str,
    Field(
        pattern=ruled(
            r"^[A-Za-z_][A-Za-z0-9_]{0,62}$",
            "must be 1-63 letters, digits or '_', not starting with a digit",
        )
    ),
]
MAX_ARGS_BYTES = 64 * 1024
_ARGS_DEPTH = 16


class ScriptSetting(SpecModel):
    """One of a command-mode script's own settings: its type, what it may be, the value
    ``orch`` hands the script (``default``) until the tuner chooses another, and whether the
    tuner may (``tune``)."""

    type: Literal["int", "float", "choice"] = Field(
        description="int or float: a range (min and max); choice: a list of values"
    )
    tune: bool = Field(
        default=True,
        description="whether the tuner may search it (judged by the SLA: speed and cost, "
        "never the loss); false: orch applies its default and the tuner leaves it alone "
        "(a learning rate)",
    )
    min: float | None = Field(
        default=None, allow_inf_nan=False, description="the lowest value of an int or float"
    )
    max: float | None = Field(
        default=None, allow_inf_nan=False, description="the highest value of an int or float"
    )
    values: list[str | int | float | bool] | None = Field(
        default=None, min_length=1, max_length=64, description="the values a choice may take"
    )
    default: str | int | float | bool = Field(
        description="the value orch hands the script until the tuner chooses another: within "
        "min and max (an integer for an int), or one of values"
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.type == "choice":
            if self.values is None or self.min is not None or self.max is not None:
                raise ValueError("a choice setting gives values (a list), not min/max")
            if self.default not in self.values:
                raise ValueError(f"default {self.default!r} must be one of values {self.values}")
            return self
        if self.values is not None or self.min is None or self.max is None:
            raise ValueError(f"an {self.type} setting gives min and max, not values")
        if self.max < self.min:
            raise ValueError(f"max ({self.max:g}) must be >= min ({self.min:g})")
        number = isinstance(self.default, int | float) and not isinstance(self.default, bool)
        if self.type == "int" and not (isinstance(self.default, int) and number):
            raise ValueError(f"default must be an integer for an int setting, got {self.default!r}")
        if not number or not self.min <= float(self.default) <= self.max:
            raise ValueError(f"default must be a number in [{self.min:g}, {self.max:g}]")
        return self


class WorkloadRef(SpecModel):
    """What to run: a built-in workload by ``name``, a user ``entry`` point, or a ``command``
    (the team's own script, run in its working directory: see docs/user-guide.md, "Command mode").
    """

    name: str | None = Field(
        default=None, description=f"a built-in workload: one of {', '.join(BUILTIN_WORKLOADS)}"
    )
    entry: str | None = Field(
        default=None,
        pattern=ENTRY_PATTERN,
        max_length=256,
        description="a team's own workload, `package.module:function` returning a Workload (the "
        "module allowed for the team by the operator's entry_modules)",
    )
    command: list[Annotated[str, Field(min_length=1, max_length=1024)]] | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="a team's own script and its arguments, run in its working directory: the "
        "program is python or python3 (the worker's Python) or a relative path within the folder",
    )
    working_dir: str | None = Field(
        default=None,
        pattern=DIGEST_PATTERN,
        description="the content digest of a command's working directory, as `orch submit "
        "--working-dir` stores it (which sets this)",
    )
    settings: dict[SettingName, ScriptSetting] = Field(
        default_factory=dict,
        max_length=64,
        description="a command's own settings, by the name its script reads them by (ctx.settings)",
    )
    first_report_s: float = Field(
        default=300.0,
        gt=0,
        le=MAX_SECONDS,
        description="seconds a command may run before its first step report: a script that "
        "never calls job.report() fails after them, instead of holding GPUs",
    )
    args: dict[str, Any] = Field(
        default_factory=dict,
        description="arguments for the workload (a command's ctx.args): plain JSON values, up to "
        "64 KiB and 16 levels",
    )

    @field_validator("args")
    @classmethod
    def _plain_args(cls, v: dict[str, Any]) -> dict[str, Any]:
        # The args travel as JSON (Redis, Ray, the worker): only what JSON holds exactly.
        problem = _json_problem(v, "", _ARGS_DEPTH)
        if problem:
            raise ValueError(problem)
        size = len(json.dumps(v))
        if size > MAX_ARGS_BYTES:
            raise ValueError(f"{size:,} bytes as JSON; at most {MAX_ARGS_BYTES:,} allowed")
        return v

    @field_validator("name")
    @classmethod
    def _known_name(cls, v: str | None) -> str | None:
        if v is not None and v not in BUILTIN_WORKLOADS:
            raise ValueError(
                f"unknown built-in workload {v!r}; built-ins: {', '.join(BUILTIN_WORKLOADS)} "
                "(or give entry: 'package.module:function', or command: [python, script.py])"
            )
        return v

    @field_validator("command")
    @classmethod
    def _in_working_dir(cls, v: list[str] | None) -> list[str] | None:
        # The allow-list for command mode: the worker's own Python, or a program of the job's
        # working directory (what the team shipped), never another program of the host.
        if v is not None and not command_program_allowed(v[0]):
            raise ValueError(
                f"the program {v[0]!r} is not allowed: give python (the worker's Python) or a "
                "relative path within the working directory (./run.sh, tools/train)"
            )
        return v

    @model_validator(mode="after")
    def _one_of(self) -> Self:
        if sum(x is not None for x in (self.name, self.entry, self.command)) != 1:
            raise ValueError(
                "give exactly one of name (a built-in), entry (module:function) or "
                "command (a list: [python, train.py, ...])"
            )
        if self.command is None and (self.working_dir or self.settings):
            raise ValueError("working_dir and settings go with command only")
        if self.command is not None and self.working_dir is None:
            raise ValueError(
                "a command needs its working directory: orch submit --working-dir DIR job.yaml"
            )
        if self.name is not None:  # a built-in's arguments, refused now rather than at start
            # imported here: the shapes pull in the plan rules (13 ms), which most readers of a
            # spec (the CLI's light paths) never need
            from workers.workloads.shapes import check_args

            try:
                check_args(self.name, self.args)
            except WorkloadError as err:
                raise ValueError(f"args: {err}") from None
        return self

    @property
    def ref(self) -> str:
        """The name or entry point, as the worker registry resolves it; for a command, the
        command line (shown, never resolved)."""
        if self.command is not None:
            return " ".join(self.command)
        return self.name if self.name is not None else str(self.entry)


def command_program_allowed(program: str) -> bool:
    """Whether a command may start with ``program``: ``python``/``python3`` (the worker's
    interpreter, with torch and ``workers.job``) or a relative path inside the working
    directory (no ``..``, not absolute)."""
    if program in PYTHONS:
        return True
    parts = Path(program).parts
    return "/" in program and not program.startswith("/") and ".." not in parts


def _json_problem(value: Any, where: str, depth: int) -> str | None:
    """Why ``value`` is not plain JSON data (``None`` if it is), naming the place within."""
    at = where or "the value"
    if value is None or isinstance(value, (str, bool)):
        return None
    if isinstance(value, int):
        return None if abs(value) < 2**63 else f"{at}: integers must be below 2**63"
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{at}: numbers must be finite, got {value}"
    if isinstance(value, (list, dict)):
        if depth <= 0:
            return f"{at}: nested more than {_ARGS_DEPTH} levels deep"
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(value, dict) and not isinstance(key, str):
                return f"{at}: keys must be strings, got {key!r}"
            problem = _json_problem(item, f"{where}.{key}" if where else str(key), depth - 1)
            if problem:
                return problem
        return None
    return (
        f"{at}: {type(value).__name__} is not allowed (strings, numbers, booleans, lists, mappings)"
    )
