"""The search-strategy family: what decides the next config to profile.

Contract: :meth:`SearchStrategy.next_config` reads the :class:`History` (never writes it) and
returns a config to profile, :data:`ASK_SAMPLER` to let the study's Optuna sampler choose, or
``None`` when it has nothing left worth trying. A strategy may keep private state between calls
(a line it is walking) but must be deterministic for the same history and seed. The tuner owns
the budget, the patience rule and the study; the strategy never runs a trial itself (it may only
hold off a patience stop while it is not done: :meth:`SearchStrategy.settled`).

Batches: with several GPUs free the tuner asks again before the trials already proposed have
reported; those are in ``history.pending``. A strategy must not propose a pending config (the
tuner closes the batch if it does), and ``None`` then means "nothing more until they report":
the tuner stops only on ``None`` with nothing pending. A strategy whose next step depends on a
pending result (a bisection) returns ``None`` while anything is pending.
"""

from __future__ import annotations

import abc
import enum
from typing import TYPE_CHECKING

from orchestrator.tuner.history import History
from orchestrator.tuner.space import Config

if TYPE_CHECKING:
    import optuna

__all__ = ["ASK_SAMPLER", "Ask", "SearchStrategy"]


class Ask(enum.Enum):
    """A strategy's answer meaning "let Optuna's sampler choose"."""

    SAMPLER = "sampler"


ASK_SAMPLER = Ask.SAMPLER


class SearchStrategy(abc.ABC):
    """Chooses the next config to profile.

    Args:
        seed: seeds any randomness (the sampler, a shuffled order).
    """

    name: str = "?"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def sampler(self) -> optuna.samplers.BaseSampler:
        """The Optuna sampler of the study. Strategies that choose configs themselves enqueue
        them (``study.enqueue_trial``), so the sampler is only consulted on ``ASK_SAMPLER``."""
        import optuna

        return optuna.samplers.RandomSampler(seed=self.seed)

    def settled(self, history: History) -> bool:
        """Whether the tuner's patience may end the search now. A strategy whose own evidence
        says it is not done may say no: with nothing feasible the stop reports the SLA
        infeasible, and a config predicted to meet it may be untried. The budget (trials,
        seconds) still bounds the search. Default: yes."""
        return True

    @abc.abstractmethod
    def next_config(self, history: History) -> Config | Ask | None:
        """The next config to profile, ``ASK_SAMPLER``, or ``None`` to stop (with trials
        pending: to wait for them)."""
