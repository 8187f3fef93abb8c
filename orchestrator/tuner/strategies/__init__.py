"""Search strategies: what picks the next config to profile (a pluggable family).

Select one by name through :data:`STRATEGIES` (``sla`` is ours; ``tpe``, ``random``, ``grid``
and ``heuristic`` are the benchmark's baselines).
"""

from __future__ import annotations

from orchestrator.tuner.strategies.base import ASK_SAMPLER, Ask, SearchStrategy
from orchestrator.tuner.strategies.grid import GridSearchStrategy
from orchestrator.tuner.strategies.heuristic import HeuristicSearchStrategy
from orchestrator.tuner.strategies.samplers import RandomSearchStrategy, TPESearchStrategy
from orchestrator.tuner.strategies.sla import SLASearchStrategy
from policies.registry import Registry

__all__ = [
    "ASK_SAMPLER",
    "STRATEGIES",
    "Ask",
    "GridSearchStrategy",
    "HeuristicSearchStrategy",
    "RandomSearchStrategy",
    "SLASearchStrategy",
    "SearchStrategy",
    "TPESearchStrategy",
]

STRATEGIES: Registry[SearchStrategy] = Registry("search strategy")
for _cls in (
    SLASearchStrategy,
    TPESearchStrategy,
    RandomSearchStrategy,
    GridSearchStrategy,
    HeuristicSearchStrategy,
):
    STRATEGIES.register(_cls.name)(_cls)
