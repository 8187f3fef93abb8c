"""The evaluator family: what one trial *is*.

Contract: :meth:`Evaluator.evaluate` profiles one config and returns a
:class:`~orchestrator.tuner.objective.Measurement` whose ``cost_s`` is the profiling time it
took. It may raise: the tuner turns an out-of-memory error (see ``oom.is_oom``) into an ``oom``
trial and any other exception into an ``error`` trial, and goes on; :class:`EvaluatorLost`
stops the tuner instead. An evaluator holds no
tuning state; the same config may be evaluated again (a real profiling run is noisy).

:meth:`Evaluator.evaluate_batch` profiles several configs at once on disjoint GPUs (the tuner
packs a batch so that their GPU counts fit the GPUs it was given); one trial failing must not
take the others down, so each entry is the measurement or the exception that trial raised.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

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

    def evaluate_batch(self, configs: Sequence[Config]) -> list[Measurement | BaseException]:
        """Profile ``configs`` at once; each entry is a measurement or what that trial raised.

        This default runs them one after the other: right for a table lookup (the tuner
        accounts a batch's time as its longest trial) and for an evaluator with one device.
        """
        out: list[Measurement | BaseException] = []
        for config in configs:
            try:
                out.append(self.evaluate(config))
            except Exception as err:  # the tuner classifies it, as for a single trial
                out.append(err)
        return out
