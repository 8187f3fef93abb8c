"""A DeepSpeed-autotuning-style heuristic, as the baseline the issue names.

DeepSpeed's autotuner (``deepspeed/autotuning``) finds the largest micro-batch that fits for a
setting by binary search, then tries micro-batches around it and stops when the metric improves
by less than a threshold (5 %). Here that runs line by line (settings, then GPU count
ascending); the whole search stops when a finished line did not improve the best by 5 %.
It knows the SLA only through the objective (feasible first, then the value).
"""

from __future__ import annotations

from orchestrator.tuner.history import History, TrialRecord
from orchestrator.tuner.space import Config, SearchSpace
from orchestrator.tuner.strategies.base import Ask, SearchStrategy

__all__ = ["HeuristicSearchStrategy"]

GAIN = 0.05

# A line is every micro-batch of one setting: named by one of its configs (``space.line`` gives
# the rest). With a global batch to keep, accumulation moves along a line (DeepSpeed's autotuner
# does the same with a fixed train_batch_size: gradient_accumulation_steps follows the
# micro-batch); without one, it is part of the setting.
Line = Config


def _lines(space: SearchSpace) -> list[Line]:
    """Every line, base settings first (no checkpointing, least accumulation or smallest
    global batch, no compile, the first precision), then by GPU count."""
    reps: dict[
        tuple[int, str, str, bool | float, bool, int, tuple[tuple[str, str], ...]], Config
    ] = {}
    for c in space.configs():
        batch = c.grad_accum if space.global_batches is None else c.global_batch
        key = (
            batch,
            c.sharding,
            c.precision,
            c.activation_checkpointing,
            c.compile,
            c.gpus,
            c.settings,  # a command job's script settings: a setting of its own
        )
        reps.setdefault(key, c)
    order = sorted(
        reps, key=lambda k: (k[3], k[0], k[4], space.precisions.index(k[2]), k[1], k[5], k[6])
    )
    return [reps[k] for k in order]


def _rank(history: History, r: TrialRecord) -> tuple[float, float]:
    """Higher is better: feasible first, then the value (or the smaller violation)."""
    v = r.verdict
    if not v.feasible:
        return (0.0, -v.violation)
    return (1.0, v.value if history.goal.direction == "maximize" else -v.value)


def _gain(history: History, new: TrialRecord | None, old: TrialRecord | None) -> bool:
    """Whether ``new`` beats ``old`` by at least GAIN."""
    if new is None:
        return False
    if old is None:
        return True
    a, b = _rank(history, new), _rank(history, old)
    if a[0] != b[0]:
        return a[0] > b[0]
    return a[1] - b[1] >= GAIN * max(abs(b[1]), 1e-12)


class HeuristicSearchStrategy(SearchStrategy):
    """Largest micro-batch that fits, then neighbours and bisection, stop below 5 % gain."""

    name = "heuristic"

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self._lines: list[Line] | None = None
        self._pos = 0
        self._best_before: TrialRecord | None = None
        self._fit: tuple[int, int] = (-1, -1)  # (largest known fit, smallest known OOM)
        self._tune: list[int] = []  # indices evaluated while tuning around the fit

    def next_config(self, history: History) -> Config | Ask | None:
        """The next point of the current line, moving to the next line when it is done.

        A line search: each point depends on the last one's result, so nothing is proposed
        while a trial is pending (batches of one, whatever the free GPUs)."""
        if history.pending:
            return None
        if self._lines is None:
            self._lines = _lines(history.space)
            self._new_line(history)
        while self._pos < len(self._lines):
            points = history.space.line(self._lines[self._pos])
            idx = self._next_on_line(points, history)
            if idx is not None:
                return points[idx]
            line_best = self._line_best(points, history)
            if not _gain(history, line_best, self._best_before):
                return None
            self._pos += 1
            self._new_line(history)
        return None

    def _new_line(self, history: History) -> None:
        self._best_before = self._overall_best(history)
        lines = self._lines or []
        on_line = history.space.line(lines[self._pos]) if self._pos < len(lines) else []
        self._fit = (-1, len(on_line))
        self._tune = []

    def _overall_best(self, history: History) -> TrialRecord | None:
        pts = list(history.points())
        return max(pts, key=lambda r: _rank(history, r)) if pts else None

    def _line_best(self, points: list[Config], history: History) -> TrialRecord | None:
        recs = [r for c in points if (r := history.measured(c)) is not None]
        return max(recs, key=lambda r: _rank(history, r)) if recs else None

    def _next_on_line(self, ladder: list[Config], history: History) -> int | None:
        """The next index on the line's points (by micro-batch), or ``None`` when done."""
        lo, hi = self._fit
        # Phase 1: largest fit, by doubling then bisection (out of memory = does not fit).
        while hi - lo > 1:
            if lo < 0:
                i = 0
            elif hi == len(ladder):  # no OOM yet: double the index step
                i = min(2 * lo + 1, hi - 1)
            else:  # bisect between the largest fit and the smallest OOM
                i = (lo + hi) // 2
            r = history.measured(ladder[i])
            if r is None:
                if history.frontier.will_oom(ladder[i]):
                    hi = i
                    self._fit = (lo, hi)
                    continue
                return i
            if r.measurement.status == "ok":
                lo = i
            else:
                hi = i
            self._fit = (lo, hi)
        if lo < 0:
            return None
        # Phase 2: from the largest fit, the lower neighbour, then bisect downwards while the
        # last step gained at least 5 %.
        if not self._tune:
            self._tune = [lo]
        last = self._tune[-1]
        if len(self._tune) >= 2:
            prev = history.measured(ladder[self._tune[-2]])
            cur = history.measured(ladder[last])
            if not _gain(history, cur, prev):
                return None
        nxt = last - 1 if len(self._tune) == 1 else last // 2
        if nxt < 0 or nxt == last or history.measured(ladder[nxt]) is not None:
            return None
        self._tune.append(nxt)
        return nxt
