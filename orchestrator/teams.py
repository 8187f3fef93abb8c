"""Team config: YAML validated once into pydantic models, handed to policies as plain views.

```yaml
allow_unlisted: true   # false: a job from a team not listed here is refused at submission
teams:
  - name: vision
    weight: 2          # share of the GPUs beyond guarantees, relative to other teams
    guaranteed_gpus: 64
    max_gpus: 256      # 0 or absent: no cap
  - name: speech
    guaranteed_gpus: 32
```
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Self

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from orchestrator.errors import SpecError
from policies.snapshot import TeamView


class TeamSpec(BaseModel):
    """One team: fair-share weight, guaranteed GPUs, cap."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    weight: float = Field(default=1.0, gt=0)
    guaranteed_gpus: int = Field(default=0, ge=0)
    max_gpus: int = Field(default=0, ge=0, description="0: no cap")

    @model_validator(mode="after")
    def _cap_covers_guarantee(self) -> Self:
        if self.max_gpus and self.max_gpus < self.guaranteed_gpus:
            raise ValueError(
                f"max_gpus ({self.max_gpus}) must be >= guaranteed_gpus ({self.guaranteed_gpus})"
            )
        return self


class TeamConfig(BaseModel):
    """All teams sharing one pool."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    teams: list[TeamSpec] = Field(default_factory=list)
    allow_unlisted: bool = Field(
        default=True,
        description="accept jobs from teams not listed (weight 1, no guarantee, no cap)",
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


def parse_teams(data: object, source: str = "<teams>") -> TeamConfig:
    """Validate a team config from plain data.

    Raises:
        SpecError: invalid fields, one line per problem with its path.
    """
    try:
        return TeamConfig.model_validate(data or {})
    except ValidationError as err:
        problems = [
            f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in err.errors()
        ]
        raise SpecError(source, problems) from None


def load_teams(path: Path) -> TeamConfig:
    """Read and validate a team config file.

    Raises:
        SpecError: unreadable YAML or invalid fields, one line per problem with its path.
    """
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise SpecError(str(path), [f"cannot read YAML: {err}"]) from None
    return parse_teams(data, str(path))


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
