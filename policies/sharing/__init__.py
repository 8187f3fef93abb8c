"""Team-sharing policies, selected by name through ``SHARINGS``."""

from policies.sharing.base import SHARINGS, TeamSharing, entitlements, water_fill
from policies.sharing.drf import DrfSharing
from policies.sharing.quota import QuotaSharing

__all__ = ["SHARINGS", "DrfSharing", "QuotaSharing", "TeamSharing", "entitlements", "water_fill"]
