"""What one decision of the ``sla`` strategy costs on the unseen tables' 1,440-config grid.

Each run tunes one unseen table's SLA through the tuner's loop; every call of the strategy
(``next_config``, and ``settled`` when the tuner asks it) is timed with ``perf_counter``, the
first of each run left out (it imports numpy and scipy). Prints ms per decision, p50 / p95 /
max, over all runs. Run it against another checkout by its ``PYTHONPATH`` to compare.

    PYTHONPATH=. .venv/bin/python -m bench.tuner.decision_cost --tables 10
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench.tuner.unseen import unseen_slas, unseen_tables
from orchestrator.tuner.history import History
from orchestrator.tuner.space import Config
from orchestrator.tuner.strategies import SLASearchStrategy
from orchestrator.tuner.strategies.base import Ask
from orchestrator.tuner.tuner import Tuner


class _Timed(SLASearchStrategy):
    """The ``sla`` strategy with each call timed."""

    def __init__(self) -> None:
        super().__init__()
        self.spent: list[float] = []

    def next_config(self, history: History) -> Config | Ask | None:
        t = time.perf_counter()
        out = super().next_config(history)
        self.spent.append(time.perf_counter() - t)
        return out

    def settled(self, history: History) -> bool:
        t = time.perf_counter()
        out = super().settled(history)
        self.spent.append(time.perf_counter() - t)
        return out


def main(argv: list[str] | None = None) -> int:
    """Time the decisions; print the figures."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tables", type=int, default=10)
    p.add_argument("--draw", type=int, default=0)
    args = p.parse_args(argv)
    times: list[float] = []
    for table in unseen_tables(args.tables, args.draw):
        for _, goal in unseen_slas(table):
            strategy = _Timed()
            Tuner(
                table.space, goal, table.evaluator(), strategy, max_trials=2 * table.space.size
            ).run()
            times += strategy.spent[1:]
    ms = sorted(1000 * t for t in times)
    print(
        f"{len(ms)} decisions, grid {unseen_tables(1, args.draw)[0].space.size} configs: "
        f"p50 {statistics.median(ms):.1f} ms, p95 {ms[int(0.95 * (len(ms) - 1))]:.1f} ms, "
        f"max {ms[-1]:.1f} ms"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
