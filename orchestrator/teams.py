"""Team config: YAML validated once into pydantic models, handed to policies as plain views.

```yaml
allow_unlisted: true   # false: a job (or token) of a team not listed here is refused
entry_modules: [ourlab]  # packages every team may name as workload entry points
teams:
  - name: vision
    weight: 2          # share of the GPUs beyond guarantees, relative to other teams
    guaranteed_gpus: 64
    max_gpus: 256      # 0 or absent: no cap
    entry_modules: [vision_models]  # and this team's own
  - name: speech
    guaranteed_gpus: 32
```
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)

from orchestrator.errors import SpecError
from orchestrator.inputs import Name, describe_errors, load_document
from orchestrator.names import ruled
from policies.snapshot import TeamView

MAX_TEAMS = 1000
MAX_WEIGHT = 1e6
MAX_TEAM_GPUS = 1_000_000
MAX_ENTRY_MODULES = 64
BUILTIN_PACKAGE = "workers.workloads"
"""Where the built-in workloads live: code the operator installed, which any team may name."""
ModuleName = Annotated[
    str,
    StringConstraints(
        pattern=ruled(
            r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$",
            "must be a Python module's dotted name (package.module)",
        ),
        max_length=200,
    ),
]
_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class TeamSpec(BaseModel):
    """One team: fair-share weight, guaranteed GPUs, cap."""

    model_config = _STRICT

    name: Name
    weight: float = Field(default=1.0, gt=0, le=MAX_WEIGHT)
    guaranteed_gpus: int = Field(default=0, ge=0, le=MAX_TEAM_GPUS)
    max_gpus: int = Field(default=0, ge=0, le=MAX_TEAM_GPUS, description="0: no cap")
    entry_modules: list[ModuleName] = Field(
        default_factory=list,
        max_length=MAX_ENTRY_MODULES,
        description="packages this team's jobs may name as entry points (with their modules)",
    )

    @model_validator(mode="after")
    def _cap_covers_guarantee(self) -> Self:
        if self.max_gpus and self.max_gpus < self.guaranteed_gpus:
            raise ValueError(
                f"max_gpus ({self.max_gpus}) must be >= guaranteed_gpus ({self.guaranteed_gpus})"
            )
        return self


class TeamConfig(BaseModel):
    """All teams sharing one pool: at least one team (an empty config would silently drop
    every guarantee and cap)."""

    model_config = _STRICT

    teams: list[TeamSpec] = Field(min_length=1, max_length=MAX_TEAMS)
    allow_unlisted: bool = Field(
        default=True,
        description="accept jobs and tokens of teams not listed (weight 1, no guarantee, no cap)",
    )
    entry_modules: list[ModuleName] = Field(
        default_factory=list,
        max_length=MAX_ENTRY_MODULES,
        description="packages every team's jobs may name as entry points (with their modules)",
    )

    @model_validator(mode="after")
    def _unique(self) -> Self:
        names = [t.name for t in self.teams]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"team names must be unique; repeated: {', '.join(dupes)}")
        return self

    def views(self, pool_gpus: int | None = None) -> tuple[TeamView, ...]:
        """The plain views policies take.

        Raises:
            SpecError: the guarantees add up to more than ``pool_gpus``.
        """
        total = sum(t.guaranteed_gpus for t in self.teams)
        if pool_gpus is not None and total > pool_gpus:
            raise SpecError(
                "<teams>",
                [f"guaranteed_gpus add up to {total}, more than the pool's {pool_gpus} GPUs"],
            )
        return tuple(TeamView(t.name, t.weight, t.guaranteed_gpus, t.max_gpus) for t in self.teams)

    def team(self, name: str) -> TeamSpec | None:
        """The listed team called ``name``, if any."""
        return next((t for t in self.teams if t.name == name), None)

    def admission_problems(self, team: str, min_gpus: int) -> list[str]:
        """Why a job of ``team`` needing at least ``min_gpus`` GPUs must be refused (none: it
        may be queued). A job that could never run under its team's cap is refused up front
        rather than left waiting forever."""
        spec = self.team(team)
        if spec is None:
            if self.allow_unlisted:
                return []
            listed = ", ".join(t.name for t in self.teams) or "none"
            return [f"team: {team!r} is not a configured team; allowed: {listed}"]
        if spec.max_gpus and min_gpus > spec.max_gpus:
            return [
                f"resources.gpus.min: {min_gpus} is more than team {team!r} may hold "
                f"(max_gpus {spec.max_gpus}); ask for at most {spec.max_gpus}"
            ]
        return []


def entry_problem(config: TeamConfig | None, team: str, entry: str) -> str | None:
    """Why ``team`` may not name the entry point ``entry`` (``None``: it may).

    Which code a team may run is the operator's choice: the built-in workloads' package, and
    the packages the team config lists (``entry_modules``, for every team or for one), each
    with its submodules. With no team config, only the built-ins.
    """
    module = entry.partition(":")[0]
    allowed = [BUILTIN_PACKAGE]
    if config is not None:
        allowed += config.entry_modules
        spec = config.team(team)
        if spec is not None:
            allowed += spec.entry_modules
    if any(module == a or module.startswith(a + ".") for a in allowed):
        return None
    return (
        f"workload.entry: module {module!r} is not one team {team!r} may run; allowed: "
        f"{', '.join(allowed)} and their modules (an operator adds packages with "
        "entry_modules in the team config: orch teams apply)"
    )


def parse_teams(data: object, source: str = "<teams>") -> TeamConfig:
    """Validate a team config from plain data.

    Raises:
        SpecError: invalid fields, one line per problem with its path.
    """
    if not isinstance(data, dict):
        got = type(data).__name__
        raise SpecError(source, [f"the team config must be a mapping with teams:, got {got}"])
    try:
        return TeamConfig.model_validate(data)
    except ValidationError as err:
        raise SpecError(source, describe_errors(err, TeamConfig)) from None


def load_teams(path: Path) -> TeamConfig:
    """Read and validate a team config file (YAML, or JSON for ``.json``), within the limits of
    :mod:`orchestrator.inputs`.

    Raises:
        SpecError: unreadable, empty or invalid file, one line per problem with its path.
    """
    return parse_teams(load_document(path), str(path))


def teams_from_usage(
    gpu_seconds: Mapping[str, float], pool_gpus: int, guaranteed_share: float = 0.5
) -> TeamConfig:
    """A team config derived from each team's GPU usage (the rule the benchmarks document).

    A team's weight is its share of the GPU-time (in percent, at least 1); its guarantee is
    that share of ``guaranteed_share`` of the pool, rounded down. So half the pool (default)
    is guaranteed in proportion to use and the rest, with idle guarantees, is shared by weight.
    """
    total = sum(gpu_seconds.values()) or 1.0
    return TeamConfig(
        teams=[
            TeamSpec(
                name=name,
                weight=max(1.0, round(100 * used / total, 1)),
                guaranteed_gpus=int(guaranteed_share * pool_gpus * used / total),
            )
            for name, used in sorted(gpu_seconds.items())
        ]
    )
