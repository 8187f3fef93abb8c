"""Team sharing: how many GPUs each team is entitled to right now."""

from __future__ import annotations

import abc
import math
from collections.abc import Mapping, Sequence

from policies.registry import Registry
from policies.snapshot import TeamView


class TeamSharing(abc.ABC):
    """Turns each team's demand into its entitlement for this round.

    Contract: ``entitlements`` is a pure, deterministic function of its inputs (no state between
    rounds). It never entitles a team to more than it asks for or more than its ``max_gpus``;
    a team that asks for at least its guarantee gets at least its guarantee (when the
    guarantees fit the pool, which the team config checks); and the entitlements sum to at
    most ``total``. A team missing from ``teams`` has weight 1, no guarantee and no cap.
    """

    @abc.abstractmethod
    def entitlements(
        self, demand: Mapping[str, int], teams: Sequence[TeamView], total: int
    ) -> dict[str, int]:
        """GPUs per team (every team in ``demand``), given the GPUs each asks for."""


SHARINGS: Registry[TeamSharing] = Registry("sharing")


def _team(teams: Sequence[TeamView], name: str) -> TeamView:
    for t in teams:
        if t.name == name:
            return t
    return TeamView(name)


def water_fill(
    caps: Mapping[str, int], weights: Mapping[str, float], start: Mapping[str, int], total: int
) -> dict[str, int]:
    """Weighted max-min fair split of ``total`` GPUs on top of ``start``, each up to its cap.

    Fractional water-filling, then whole GPUs by largest remainder (ties by team name).
    """
    share = {t: float(start.get(t, 0)) for t in caps}
    left = float(total - sum(start.get(t, 0) for t in caps))
    active = sorted(t for t in caps if caps[t] > share[t])
    while left > 1e-9 and active:
        wsum = sum(weights[t] for t in active)
        level = left / wsum
        capped = [t for t in active if share[t] + level * weights[t] >= caps[t]]
        if not capped:
            for t in active:
                share[t] += level * weights[t]
            left = 0.0
            break
        for t in capped:
            left -= caps[t] - share[t]
            share[t] = float(caps[t])
        active = [t for t in active if t not in capped]
    out = {t: math.floor(v + 1e-9) for t, v in share.items()}
    spare = total - sum(out.values())
    order = sorted(caps, key=lambda t: (-(share[t] - out[t]), t))
    for t in order:
        if spare <= 0:
            break
        if out[t] < caps[t] and share[t] - out[t] > 1e-9:
            out[t] += 1
            spare -= 1
    return out


def entitlements(
    demand: Mapping[str, int], teams: Sequence[TeamView], total: int
) -> dict[str, int]:
    """Guarantee first, then a weighted max-min (single-resource DRF) share of the rest.

    Each team first gets ``min(demand, guarantee)``; the GPUs left (idle guarantees included:
    that is borrowing) are shared by weight among teams that want more, each up to its
    demand and ``max_gpus``.
    """
    caps: dict[str, int] = {}
    weights: dict[str, float] = {}
    start: dict[str, int] = {}
    budget = total
    for name in sorted(demand):
        t = _team(teams, name)
        cap = max(0, demand[name])
        if t.max_gpus:
            cap = min(cap, t.max_gpus)
        caps[name] = cap
        weights[name] = t.weight if t.weight > 0 else 1.0
        start[name] = min(cap, t.guaranteed_gpus, budget)
        budget -= start[name]
    return water_fill(caps, weights, start, total)
