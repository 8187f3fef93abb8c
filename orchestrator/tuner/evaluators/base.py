"""The evaluator family: what one trial *is*.

Contract: :meth:`Evaluator.evaluate` profiles one config and returns a
:class:`~orchestrator.tuner.objective.Measurement` whose ``cost_s`` is the profiling time it
took. It may raise: the tuner turns an out-of-memory error (see ``oom.is_oom``) into an ``oom``
trial and any other exception into an ``error`` trial, and goes on; :class:`EvaluatorLost`
stops the tuner instead. An evaluator holds no
tuning state; the same config may be evaluated again (a real profiling run is noisy).
"""

from __future__ import annotations

import abc

from orchestrator.tuner.objective import Measurement
from orchestrator.tuner.space import Config, DeviceCaps

__all__ = ["Evaluator", "EvaluatorLost"]


class EvaluatorLost(RuntimeError):
    """The evaluator itself broke (its workers cannot be started or reached), so the trial
    says nothing about the config: the tuner stops with this error instead of recording an
    infeasible trial, and the tuning run is retried (the study resumes from Redis)."""


class Evaluator(abc.ABC):
    """Runs (or looks up) one profiling trial.

    Attributes:
        caps: what the device behind this evaluator can run (shapes the search space).
    """

    caps: DeviceCaps

    @abc.abstractmethod
    def evaluate(self, config: Config) -> Measurement:
        """Profile ``config``: warm-up steps excluded, then measured steps."""
