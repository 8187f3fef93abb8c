"""Team config: YAML validated once into pydantic models, handed to policies as plain views.

```yaml
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


def load_teams(path: Path) -> TeamConfig:
    """Read and validate a team config file.

    Raises:
        SpecError: unreadable YAML or invalid fields, one line per problem with its path.
    """
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise SpecError(str(path), [f"cannot read YAML: {err}"]) from None
    try:
        return TeamConfig.model_validate(data or {})
    except ValidationError as err:
        problems = [
            f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in err.errors()
        ]
        raise SpecError(str(path), problems) from None


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
