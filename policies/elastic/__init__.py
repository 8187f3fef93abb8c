"""Elastic-allocation policies, selected by name through ``ELASTIC``."""

from policies.elastic.base import ELASTIC, ElasticAllocation, ElasticJob, admit
from policies.elastic.fixed import FixedElastic
from policies.elastic.goodput import GoodputElastic

__all__ = ["ELASTIC", "ElasticAllocation", "ElasticJob", "FixedElastic", "GoodputElastic", "admit"]
