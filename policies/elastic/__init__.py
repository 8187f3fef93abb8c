"""Elastic-allocation policies, selected by name through ``ELASTIC``."""

from policies.elastic.base import ELASTIC, ElasticAllocation, ElasticJob, admit, grow_urgent
from policies.elastic.fixed import FixedElastic
from policies.elastic.genetic import GeneticElastic
from policies.elastic.goodput import GoodputElastic
from policies.elastic.search import SearchElastic

__all__ = [
    "ELASTIC",
    "ElasticAllocation",
    "ElasticJob",
    "FixedElastic",
    "GeneticElastic",
    "GoodputElastic",
    "SearchElastic",
    "admit",
    "grow_urgent",
]
