"""Placement policies, selected by name through ``PLACEMENTS``."""

from policies.placement.base import PLACEMENTS, FreeIndex, Placement, without
from policies.placement.most_free import MostFreePlacement
from policies.placement.pack import PackPlacement
from policies.placement.spread import SpreadPlacement
from policies.placement.topology import TopologyPlacement

__all__ = [
    "PLACEMENTS",
    "FreeIndex",
    "MostFreePlacement",
    "PackPlacement",
    "Placement",
    "SpreadPlacement",
    "TopologyPlacement",
    "without",
]
