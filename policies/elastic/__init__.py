"""Elastic-allocation policies, selected by name through ``ELASTIC``."""

from policies.elastic.base import ELASTIC, ElasticAllocation, ElasticJob, admit, grow_urgent
from policies.elastic.fixed import FixedElastic
from policies.elastic.genetic import GeneticElastic
from policies.elastic.goodput import GoodputElastic

__all__ = [
    "ELASTIC",
    "ElasticAllocation",
    "ElasticJob",
    "FixedElastic",
    "GeneticElastic",
    "GoodputElastic",
    "admit",
    "grow_urgent",
]
