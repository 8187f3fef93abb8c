"""The tuning loop: strategy proposes, Optuna records, the evaluator measures.

The same loop drives a real profiling run (the harness evaluator) and a table lookup (the
benchmark), so strategies are compared on exactly the code that tunes jobs. Every trial is an
Optuna trial of one study: a strategy that picks configs itself enqueues them
(``study.enqueue_trial``), one that defers lets the study's sampler choose; each trial carries
its constraints (``trial.set_constraint``), its measurement and its config as user attributes,
so ``optuna-dashboard`` and ``study.best_trial`` see the same feasibility the tuner does.

Never crash, waste little: an evaluator exception becomes an infeasible trial; a config already
measured is not measured again; with ``prune`` a config known to run out of memory or to miss
the latency ceiling is skipped; the search stops when the best has not improved by more than
``min_gain`` for ``patience`` trials, or at the budget.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from orchestrator.tuner.evaluators.base import Evaluator, EvaluatorLost
from orchestrator.tuner.history import History, Source, TrialRecord
from orchestrator.tuner.objective import Goal, Measurement
from orchestrator.tuner.space import Config, SearchSpace
from orchestrator.tuner.strategies.base import ASK_SAMPLER, SearchStrategy

if TYPE_CHECKING:
    import optuna

__all__ = ["TuneResult", "Tuner"]

log = logging.getLogger(__name__)

OnTrial = Callable[[TrialRecord, History], None]


@dataclass(frozen=True)
class TuneResult:
    """The outcome of a tuning run.

    Attributes:
        status: ``feasible`` (a config meets the SLA) or ``sla-infeasible``.
        best: the best feasible trial (``None`` when infeasible).
        closest: the trial nearest to feasible (reported when infeasible).
        reason: why the SLA cannot be met, in words (empty when feasible).
        stopped: why the search stopped (``done``, ``patience``, ``trials``, ``seconds``).
        history: every trial.
    """

    status: Literal["feasible", "sla-infeasible"]
    best: TrialRecord | None
    closest: TrialRecord | None
    reason: str
    stopped: str
    history: History

    @property
    def chosen(self) -> TrialRecord | None:
        """The config to run: the best, else the closest (for a best-effort job)."""
        return self.best or self.closest

    @property
    def trials(self) -> int:
        """Profiling runs actually made."""
        return sum(1 for r in self.history.records if r.source == "measured")

    @property
    def cost_s(self) -> float:
        """Profiling seconds spent."""
        return self.history.cost_s


class Tuner:
    """Tunes one job's config against its SLA.

    Args:
        space: what may be tried.
        goal: the SLA as objective and constraints.
        evaluator: runs (or looks up) one trial.
        strategy: picks the next config.
        study: the Optuna study recording the trials (see ``orchestrator.tuner.study``); by
            default an in-memory one with the strategy's sampler. Trials already in it (a
            resumed study) are read back, not re-run.
        max_trials: at most this many trials (repeats and skipped ones included).
        max_seconds: stop once this many profiling seconds are spent.
        patience: stop after this many trials without a gain above ``min_gain``.
        min_gain: the relative improvement that resets the patience.
        prune: skip configs known to be infeasible (out of memory, latency already missed).
        warm_start: configs to try first (the nearest cached ones).
        known: measurements already made (a cache entry), used as trials at no cost.
        on_trial: called after every trial (progress bars).
    """

    def __init__(
        self,
        space: SearchSpace,
        goal: Goal,
        evaluator: Evaluator,
        strategy: SearchStrategy,
        *,
        study: optuna.Study | None = None,
        max_trials: int | None = None,
        max_seconds: float | None = None,
        patience: int | None = 10,
        min_gain: float = 0.01,
        prune: bool = True,
        warm_start: list[Config] | None = None,
        known: list[tuple[Config, Measurement]] | None = None,
        on_trial: OnTrial | None = None,
    ) -> None:
        self.space = space
        self.goal = goal
        self.evaluator = evaluator
        self.strategy = strategy
        self.study = study if study is not None else _memory_study(goal, strategy)
        self.max_trials = max_trials if max_trials is not None else 4 * space.size
        self.max_seconds = max_seconds
        self.patience = patience
        self.min_gain = min_gain
        self.prune = prune
        self.warm_start = [c for c in (warm_start or []) if space.contains(c)]
        self.known = [(c, m) for c, m in (known or []) if space.contains(c)]
        self.on_trial = on_trial

    def run(self) -> TuneResult:
        """Search until the strategy is done, the patience runs out or the budget is spent."""
        history = History(self.space, self.goal)
        for rec in resume(self.study, self.space, self.goal):
            history.add(rec)
        for config, m in self.known:
            if history.measured(config) is None:
                history.add(TrialRecord(-1, config, m, self.goal.judge(config, m), "cached"))
        queue = [c for c in self.warm_start if history.measured(c) is None]
        stale, mark = 0, _progress_mark(history)
        stopped = "done"
        while True:
            if len(history) >= self.max_trials:
                stopped = "trials"
                break
            if self.max_seconds is not None and history.cost_s >= self.max_seconds:
                stopped = "seconds"
                break
            if self.patience is not None and stale >= self.patience:
                stopped = "patience"
                break
            proposal = queue.pop(0) if queue else self.strategy.next_config(history)
            if proposal is None:
                break
            rec = self._trial(proposal if proposal is not ASK_SAMPLER else None, history)
            history.add(rec)
            if self.on_trial is not None:
                self.on_trial(rec, history)
            new_mark = _progress_mark(history)
            if _improved(self.goal, new_mark, mark, self.min_gain):
                stale, mark = 0, new_mark
            else:
                stale += 1
        return _result(history, stopped)

    def _trial(self, config: Config | None, history: History) -> TrialRecord:
        import optuna

        if config is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # enqueue_trial is marked experimental
                self.study.enqueue_trial(SearchSpace.params(config))
        trial = self.study.ask()
        chosen = self.space.suggest(trial)
        source: Source = "measured"
        prior = history.measured(chosen)
        reason = history.prune_reason(chosen) if self.prune and prior is None else None
        if prior is not None:
            measurement, source = prior.measurement, "repeat"
        elif reason is not None:
            measurement, source = Measurement("error", message=f"skipped: {reason}"), "pruned"
        else:
            measurement = self._measure(chosen)
        verdict = self.goal.judge(chosen, measurement)
        for key, value in verdict.constraints.items():
            trial.set_constraint(key, value)
        trial.set_user_attr("config", chosen.to_dict())
        trial.set_user_attr("measurement", measurement.to_dict())
        trial.set_user_attr("source", source)
        if verdict.reason:
            trial.set_user_attr("reason", verdict.reason)
        if source == "pruned":
            self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            self.study.tell(trial, verdict.value)
        return TrialRecord(trial.number, chosen, measurement, verdict, source)

    def _measure(self, config: Config) -> Measurement:
        t0 = time.perf_counter()
        try:
            m = self.evaluator.evaluate(config)
        except EvaluatorLost:
            raise  # not the config's fault: nothing to record about it
        except Exception as err:  # a trial must never take the tuner down
            from orchestrator.tuner.oom import is_oom

            status: Literal["oom", "error"] = "oom" if is_oom(err) else "error"
            log.info("trial %s failed: %s: %s", config, type(err).__name__, err)
            text = str(err).strip().splitlines()
            return Measurement(
                status,
                cost_s=time.perf_counter() - t0,
                message=f"{type(err).__name__}: {text[0] if text else ''}"[:300],
            )
        return m


def _memory_study(goal: Goal, strategy: SearchStrategy) -> optuna.Study:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(direction=goal.direction, sampler=strategy.sampler())


def resume(study: optuna.Study, space: SearchSpace, goal: Goal) -> list[TrialRecord]:
    """The finished trials of a study written by a tuner (to resume it without re-running)."""
    import optuna

    out: list[TrialRecord] = []
    for t in study.get_trials(deepcopy=False, states=[optuna.trial.TrialState.COMPLETE]):
        cfg, meas = t.user_attrs.get("config"), t.user_attrs.get("measurement")
        if not isinstance(cfg, dict) or not isinstance(meas, dict):
            continue
        config = Config.from_dict(cfg)
        if not space.contains(config):
            continue
        m = Measurement.from_dict(meas)
        out.append(TrialRecord(t.number, config, m, goal.judge(config, m), "cached"))
    return out


def _progress_mark(history: History) -> tuple[bool, float]:
    best = history.best
    if best is not None:
        return True, best.verdict.value
    closest = history.closest
    return False, closest.verdict.violation if closest is not None else math.inf


def _improved(goal: Goal, new: tuple[bool, float], old: tuple[bool, float], by: float) -> bool:
    """Feasible for the first time, a value better by more than ``by``, or (while nothing is
    feasible) a violation smaller by more than ``by`` of the SLA."""
    if new[0] != old[0]:
        return new[0]
    if new[0]:
        return goal.better(new[1], old[1], by)
    return new[1] < old[1] - by


def _result(history: History, stopped: str) -> TuneResult:
    best, closest = history.best, history.closest
    if best is not None:
        return TuneResult("feasible", best, closest, "", stopped, history)
    reason = closest.verdict.reason if closest is not None else "no trial could run"
    return TuneResult("sla-infeasible", None, closest, reason, stopped, history)


def summary(result: TuneResult) -> dict[str, Any]:
    """The result as JSON data (stored on the job, printed by the CLI)."""
    chosen = result.chosen
    return {
        "status": result.status,
        "reason": result.reason,
        "stopped": result.stopped,
        "trials": result.trials,
        "profiling_s": round(result.cost_s, 3),
        "config": chosen.config.to_dict() if chosen else None,
        "measurement": chosen.measurement.to_dict() if chosen else None,
        "value": chosen.verdict.value if chosen else None,
    }
