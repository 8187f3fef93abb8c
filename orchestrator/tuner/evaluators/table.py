"""A tabular evaluator: every config's measurement is known in advance (benchmarks, tests).

A trial is a lookup that *costs* the table's profiling time for that config, so strategies are
compared on the profiling time they would have spent, with the same ground truth for all.
A config absent from the table did not fit: it is an out-of-memory trial.
"""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.tuner.evaluators.base import Evaluator
from orchestrator.tuner.objective import Measurement
from orchestrator.tuner.space import Config, DeviceCaps

__all__ = ["TableEvaluator"]


class TableEvaluator(Evaluator):
    """Looks trials up in a table.

    Args:
        rows: config -> its measurement (``cost_s`` included).
        caps: the device the table was measured on.
        oom_cost_s: what a trial of a config missing from the table costs (starting the
            workers and failing on the first step).
        forward_only: the table is of a forward-only workload.
    """

    def __init__(
        self,
        rows: Mapping[Config, Measurement],
        caps: DeviceCaps,
        oom_cost_s: float = 0.0,
        *,
        forward_only: bool = False,
    ) -> None:
        self._forward_only = forward_only
        self.rows = dict(rows)
        self.caps = caps
        self.oom_cost_s = oom_cost_s
        self.calls = 0

    def forward_only(self) -> bool:
        """As the table was declared."""
        return self._forward_only

    def evaluate(self, config: Config) -> Measurement:
        """The table's measurement, or an ``oom`` trial for a config it does not hold."""
        self.calls += 1
        found = self.rows.get(config)
        if found is None:
            return Measurement("oom", cost_s=self.oom_cost_s, message="not in the table")
        return found
