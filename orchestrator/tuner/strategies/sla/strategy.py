"""The SLA strategy: the evidence built once, then the named steps in order."""

from __future__ import annotations

from orchestrator.tuner.history import History
from orchestrator.tuner.space import Config
from orchestrator.tuner.strategies.base import Ask, SearchStrategy
from orchestrator.tuner.strategies.sla.evidence import Evidence
from orchestrator.tuner.strategies.sla.steps import (
    approach,
    exploit,
    neighbour,
    open_neighbours,
    score,
    verdict_guard,
    walk,
)

__all__ = ["SLASearchStrategy"]


class SLASearchStrategy(SearchStrategy):
    """Model-guided search with monotone pruning (see the package doc).

    Args:
        seed: unused (the strategy is deterministic).
        min_gain: stop when nothing is predicted to beat the best by more than this fraction.
    """

    name = "sla"

    def __init__(self, seed: int = 0, min_gain: float = 0.01) -> None:
        super().__init__(seed)
        self.min_gain = min_gain
        self._last: tuple[History, int, frozenset[Config], Evidence] | None = None

    def _evidence(self, history: History) -> Evidence:
        """The evidence of ``history`` as it stands: built once per state of it (the tuner
        asks :meth:`settled` and then :meth:`next_config` of the same history; a history only
        grows, so its length and the trials pending name its state)."""
        size, pending = len(history), frozenset(history.pending)
        last = self._last
        if last is None or last[0] is not history or last[1:3] != (size, pending):
            last = self._last = (history, size, pending, Evidence.build(history))
        return last[3]

    def settled(self, history: History) -> bool:
        """Whether the tuner's patience may stop the search. With nothing feasible its stop is
        an infeasible verdict: not while a config the hard rules allow is predicted to meet the
        SLA (by a family's own model or a borrowed one), nor while a neighbour of the closest
        config on any axis is open (``steps.axis_neighbours``). With a best: not while a config is
        predicted to beat it by more than ``min_gain`` (the strategy's own stop rule; trials
        spent walking other families or finding a memory limit gain nothing but are not what
        the patience is for). The local search after that runs under the patience."""
        ev = self._evidence(history)
        scored = score(ev)
        if ev.best is not None:
            if exploit(ev, scored, self.min_gain) is not None:
                return False
            # the best's own neighbours on every axis measured before the stop (local search)
            near = set(open_neighbours(ev, ev.best.config))
            return not any(p.config in near for p in scored)
        if any(p.ok for p in scored):
            return False
        # the neighbour rule: no verdict while a neighbour of the closest is open
        return ev.closest is None or not open_neighbours(ev, ev.closest.config)

    def next_config(self, history: History) -> Config | Ask | None:
        """The config predicted best under the SLA among those the hard rules allow."""
        ev = self._evidence(history)
        walked = walk(ev, self.min_gain)
        if walked is not None:
            return walked
        scored = score(ev)
        best = exploit(ev, scored, self.min_gain)
        if best is not None:
            return best
        walked = walk(ev, self.min_gain, checkpointing=True)
        if walked is not None:
            return walked
        if ev.best is not None:
            return neighbour(ev, ev.best.config, scored)
        return approach(ev, scored, self.min_gain) or verdict_guard(ev, scored)
