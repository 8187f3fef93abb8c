"""Exhaustive grid search: every config once, in a seeded random order.

Hand-written rather than Optuna's ``GridSampler``: sharding exists only with more than one GPU,
and a fixed grid would profile each one-GPU config once per sharding value.
"""

from __future__ import annotations

import random

from orchestrator.tuner.history import History
from orchestrator.tuner.space import Config
from orchestrator.tuner.strategies.base import Ask, SearchStrategy

__all__ = ["GridSearchStrategy"]


class GridSearchStrategy(SearchStrategy):
    """Profiles the whole space: the ground truth other strategies are judged against."""

    name = "grid"

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self._order: list[Config] | None = None

    def next_config(self, history: History) -> Config | Ask | None:
        """The next config not measured yet, or ``None`` when the grid is done."""
        if self._order is None:
            self._order = list(history.space.configs())
            random.Random(self.seed).shuffle(self._order)
        while self._order:
            cfg = self._order.pop()
            if history.untried(cfg):
                return cfg
        return None
