"""Guaranteed quotas, borrowing of idle GPUs, weighted fair share beyond quotas."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from policies.sharing.base import SHARINGS, TeamSharing, entitlements
from policies.snapshot import TeamView


@SHARINGS.register("drf")
class DrfSharing(TeamSharing):
    """Each team gets its guarantee when it asks for it; the rest is shared by weight.

    With one resource (GPUs), Dominant Resource Fairness (Ghodsi et al., NSDI'11) is weighted
    max-min fairness on GPU shares: water-filling by weight, each team up to its demand and cap.
    GPUs a team does not use are lent to others (borrowing); when the owner asks again, its
    entitlement rises back to its guarantee and the borrowers' falls (reclaim).
    """

    def entitlements(
        self, demand: Mapping[str, int], teams: Sequence[TeamView], total: int
    ) -> dict[str, int]:
        """See :meth:`TeamSharing.entitlements`."""
        return entitlements(demand, teams, total)
