"""Hard quotas: a team gets at most its guarantee, idle GPUs are not lent."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from policies.sharing.base import SHARINGS, TeamSharing, _team, water_fill
from policies.snapshot import TeamView


@SHARINGS.register("quota")
class QuotaSharing(TeamSharing):
    """Static partitioning among teams: ``min(demand, guarantee)``, no borrowing.

    Teams without a guarantee share what no guarantee covers, by weight. It is the baseline
    that borrowing improves on: idle guaranteed GPUs stay idle.
    """

    def entitlements(
        self, demand: Mapping[str, int], teams: Sequence[TeamView], total: int
    ) -> dict[str, int]:
        """See :meth:`TeamSharing.entitlements`."""
        out: dict[str, int] = {}
        reserved = sum(t.guaranteed_gpus for t in teams)
        free_caps: dict[str, int] = {}
        weights: dict[str, float] = {}
        for name in sorted(demand):
            t = _team(teams, name)
            if t.guaranteed_gpus:
                out[name] = min(demand[name], t.guaranteed_gpus)
            else:
                free_caps[name] = demand[name]
                weights[name] = t.weight if t.weight > 0 else 1.0
        out.update(water_fill(free_caps, weights, {}, max(0, total - reserved)))
        return out
