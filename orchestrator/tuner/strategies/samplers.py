"""Optuna's own samplers as strategies: the baselines are Optuna, unmodified."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.tuner.history import History
from orchestrator.tuner.space import Config
from orchestrator.tuner.strategies.base import ASK_SAMPLER, Ask, SearchStrategy

if TYPE_CHECKING:
    import optuna

__all__ = ["RandomSearchStrategy", "TPESearchStrategy"]


class TPESearchStrategy(SearchStrategy):
    """Optuna's default sampler, TPE with its defaults (10 random start-up trials); it reads
    the constraints each trial sets (c-TPE style feasibility, Optuna >= 3.0). With
    ``constant_liar`` (Optuna 5's default, stated here so that a change of default cannot
    undo it) the trials of a running batch count as bad results when the next one is asked,
    which keeps one batch's proposals apart; asked one at a time, nothing is running and it
    changes nothing."""

    name = "tpe"

    def sampler(self) -> optuna.samplers.BaseSampler:
        """``TPESampler(seed=seed, constant_liar=True)``."""
        import optuna

        return optuna.samplers.TPESampler(seed=self.seed, constant_liar=True)

    def next_config(self, history: History) -> Config | Ask | None:
        """Always defers to the sampler."""
        return ASK_SAMPLER


class RandomSearchStrategy(SearchStrategy):
    """Uniform random search (``RandomSampler``)."""

    name = "random"

    def next_config(self, history: History) -> Config | Ask | None:
        """Always defers to the sampler."""
        return ASK_SAMPLER
