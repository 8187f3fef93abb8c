"""Placement policies, selected by name through ``PLACEMENTS``."""

from policies.placement.base import PLACEMENTS, Placement
from policies.placement.pack import PackPlacement
from policies.placement.spread import SpreadPlacement

__all__ = ["PLACEMENTS", "PackPlacement", "Placement", "SpreadPlacement"]
