"""The tuning loop: strategy proposes, Optuna records, the evaluator measures.

The same loop drives a real profiling run (the harness evaluator) and a table lookup (the
benchmark), so strategies are compared on exactly the code that tunes jobs. Every trial is an
Optuna trial of one study: a strategy that picks configs itself enqueues them
(``study.enqueue_trial``), one that defers lets the study's sampler choose; each trial carries
its constraints (``record_constraints``), its measurement and its config as user attributes,
so ``optuna-dashboard`` and ``study.best_trial`` see the same feasibility the tuner does.

Never crash, waste little: an evaluator exception becomes an infeasible trial; a config already
measured is not measured again; with ``prune`` a config known to run out of memory or to miss
the latency ceiling is skipped; the search stops when the best has not improved by more than
``min_gain`` for ``patience`` trials (unless the strategy is not done:
``SearchStrategy.settled``), or at the budget.

Parallel tuning (``free_gpus=k``): the tuner asks for proposals until a batch fills ``k`` GPUs
(a ``g``-GPU trial takes ``g``), runs the batch at once (``Evaluator.evaluate_batch``), then
tells Optuna every result in the order asked. Optuna allows several trials asked before any is
told; the strategy sees the running configs in ``history.pending`` and proposes others (our
``sla`` strategy: the next best predicted; TPE: ``constant_liar``). With ``k = 1`` the
sequential loop runs, unchanged. Our own executor rather than Ray Tune's trial execution:
Ray Tune owns the trial loop and its searcher (``OptunaSearch`` keeps its own study), so the
study in Redis, the strategies' enqueued configs, the pruning and repeat rules and the OOM
handling would all move behind its API; and each Ray Tune trial asks Ray for its own resources
(a placement group per trial), while a tuning run already holds its GPUs in the gang the
scheduler reserved for it. Trials here run on disjoint slices of that gang's actors
(``evaluators.gang``), and a table lookup needs no executor at all.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from orchestrator.errors import TuneError
from orchestrator.tuner.evaluators.base import Evaluator, EvaluatorLost
from orchestrator.tuner.history import History, Source, TrialRecord
from orchestrator.tuner.objective import Goal, Measurement
from orchestrator.tuner.space import Config, SearchSpace
from orchestrator.tuner.strategies.base import ASK_SAMPLER, SearchStrategy
from orchestrator.tuner.study import record_constraints

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
        wall_s: the profiling seconds the run took end to end: each batch counts its longest
            trial (one at a time, the same as ``cost_s``).
    """

    status: Literal["feasible", "sla-infeasible"]
    best: TrialRecord | None
    closest: TrialRecord | None
    reason: str
    stopped: str
    history: History
    wall_s: float = 0.0

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
        free_gpus: GPUs the trials may share: a batch runs trials whose GPU counts add up to
            at most this (1: one trial at a time, the sequential loop).
        trial_gpus: the GPUs one trial holds (default: its config's GPU count); never more
            than ``free_gpus``, so a trial larger than the pool runs alone.
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
        free_gpus: int = 1,
        trial_gpus: Callable[[Config], int] | None = None,
    ) -> None:
        if free_gpus < 1:
            raise ValueError(f"free_gpus must be >= 1, got {free_gpus}")
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
        self.free_gpus = free_gpus
        self.trial_gpus = trial_gpus
        self.wall_s = 0.0  # profiling seconds end to end (a batch counts its longest trial)

    def run(self) -> TuneResult:
        """Search until the strategy is done, the patience runs out or the budget is spent."""
        history = History(self.space, self.goal)
        for rec in resume(self.study, self.space, self.goal):
            history.add(rec)
        for config, m in self.known:
            if history.measured(config) is None:
                history.add(TrialRecord(-1, config, m, self.goal.judge(config, m), "cached"))
        queue = [c for c in self.warm_start if history.measured(c) is None]
        if self.free_gpus > 1:
            return _result(history, self._run_batched(history, queue), self.wall_s)
        stale, mark = 0, _progress_mark(history)
        stopped = "done"
        while True:
            limit = self._limit(history, stale)
            if limit is not None:
                stopped = limit
                break
            proposal = queue.pop(0) if queue else self.strategy.next_config(history)
            if proposal is None:
                break
            rec = self._trial(proposal if proposal is not ASK_SAMPLER else None, history)
            self.wall_s += rec.cost_s
            history.add(rec)
            if self.on_trial is not None:
                self.on_trial(rec, history)
            new_mark = _progress_mark(history)
            if _improved(self.goal, new_mark, mark, self.min_gain):
                stale, mark = 0, new_mark
            else:
                stale += 1
        return _result(history, stopped, self.wall_s)

    def _limit(self, history: History, stale: int) -> str | None:
        """Which budget or patience rule stops the search now, if any."""
        if len(history) >= self.max_trials:
            return "trials"
        if self.max_seconds is not None and history.cost_s >= self.max_seconds:
            return "seconds"
        # the strategy may hold a patience stop while its own evidence says it is not done
        if self.patience is not None and stale >= self.patience and self.strategy.settled(history):
            return "patience"
        return None

    def _run_batched(self, history: History, queue: list[Config]) -> str:
        """The loop with batches of trials at once (see module doc); returns why it stopped.

        The patience counts batches, not trials: a batch is one round of results, as a trial
        is one at a time, and the strategy learns only between rounds (eight trials asked
        before any result are no more informed than one). The budget is checked between
        batches."""
        stale, mark = 0, _progress_mark(history)
        carry: _Slot | None = None
        while True:
            limit = self._limit(history, stale)
            if limit is not None:
                if carry is not None:
                    self._drop(carry)
                return limit
            batch, carry = self._fill(history, queue, carry)
            if not batch:
                return "done"
            for rec in self._run_batch(batch, history):
                history.add(rec)
                if self.on_trial is not None:
                    self.on_trial(rec, history)
            new_mark = _progress_mark(history)
            if _improved(self.goal, new_mark, mark, self.min_gain):
                stale, mark = 0, new_mark
            else:
                stale += 1

    def _gpus(self, config: Config) -> int:
        held = self.trial_gpus(config) if self.trial_gpus is not None else config.gpus
        return max(1, min(held, self.free_gpus))

    def _fill(
        self, history: History, queue: list[Config], carry: _Slot | None
    ) -> tuple[list[_Slot], _Slot | None]:
        """Ask for trials until their GPUs fill ``free_gpus`` (or the strategy has nothing
        more until they report); returns the batch and a sampler's trial that did not fit
        (it opens the next batch). Repeats and pruned trials hold no GPU."""
        batch: list[_Slot] = []
        used = 0
        if carry is not None:
            batch.append(carry)
            used = self._gpus(carry.config)
            history.pending.add(carry.config)
        while used < self.free_gpus and len(history) + len(batch) < self.max_trials:
            proposal = queue[0] if queue else self.strategy.next_config(history)
            if proposal is None:
                break
            if proposal is not ASK_SAMPLER:
                if proposal in history.pending:
                    break  # it waits for the running trial's result
                if used and used + self._gpus(proposal) > self.free_gpus:
                    if not queue:
                        queue.insert(0, proposal)  # opens the next batch (a strategy may not
                    break  # propose it again: the grid has moved on)
                if queue:
                    queue.pop(0)
            trial, chosen = self._ask(proposal if proposal is not ASK_SAMPLER else None)
            slot = _Slot(trial, chosen, *self._known(chosen, history))
            if chosen in history.pending:
                slot.source = "repeat"  # its measurement comes from the running trial
            if slot.source == "measured":
                need = self._gpus(chosen)
                if used and used + need > self.free_gpus:
                    return batch, slot  # only a sampler's trial: it was asked already
                used += need
                history.pending.add(chosen)
            batch.append(slot)
        return batch, None

    def _run_batch(self, batch: list[_Slot], history: History) -> list[TrialRecord]:
        """Measure the batch's new configs at once, then tell every trial in ask order."""
        runs = [s for s in batch if s.source == "measured"]
        try:
            t0 = time.perf_counter()
            results = self.evaluator.evaluate_batch([s.config for s in runs]) if runs else []
            elapsed = time.perf_counter() - t0
        finally:
            history.pending.clear()
        for r in results:
            if isinstance(r, EvaluatorLost):
                raise r  # not the configs' fault: nothing to record about them
        got: dict[Config, Measurement] = {}
        for s, r in zip(runs, results, strict=True):
            # A trial that raised costs the batch's time (its own is not known).
            m = r if isinstance(r, Measurement) else _failed(s.config, r, elapsed)
            s.measurement = got[s.config] = m
        self.wall_s += max((m.cost_s for m in got.values()), default=0.0)
        out = []
        for s in batch:
            m = s.measurement if s.measurement is not None else got[s.config]
            out.append(self._tell(s.trial, s.config, m, s.source))
        return out

    def _drop(self, slot: _Slot) -> None:
        """A trial asked but never run (the search stopped first): failed, so that a resumed
        study's sampler does not see it running forever."""
        import optuna

        slot.trial.set_user_attr("reason", "not run: the search stopped")
        self.study.tell(slot.trial, state=optuna.trial.TrialState.FAIL)

    def _trial(self, config: Config | None, history: History) -> TrialRecord:
        trial, chosen = self._ask(config)
        measurement, source = self._known(chosen, history)
        if measurement is None:
            measurement = self._measure(chosen)
        return self._tell(trial, chosen, measurement, source)

    def _ask(self, config: Config | None) -> tuple[optuna.trial.Trial, Config]:
        """A new trial of the study: ``config`` (enqueued), or the sampler's choice.

        Raises:
            TuneError: the strategy proposed a config outside the space (one that breaks the
                job's global batch, say): a bug in the strategy, never measured.
        """
        if config is not None:
            if not self.space.contains(config):
                raise TuneError(
                    f"strategy {self.strategy.name!r} proposed {config.describe()} (global batch "
                    f"{config.global_batch}), which is not a point of the search space"
                )
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # enqueue_trial is marked experimental
                self.study.enqueue_trial(self.space.params(config))
        trial = self.study.ask()
        return trial, self.space.suggest(trial)

    def _known(self, config: Config, history: History) -> tuple[Measurement | None, Source]:
        """What a trial of ``config`` needs no run for: a repeat, or a pruned config."""
        prior = history.measured(config)
        if prior is not None:
            return prior.measurement, "repeat"
        reason = history.prune_reason(config) if self.prune else None
        if reason is not None:
            return Measurement("error", message=f"skipped: {reason}"), "pruned"
        return None, "measured"

    def _tell(
        self, trial: optuna.trial.Trial, chosen: Config, measurement: Measurement, source: Source
    ) -> TrialRecord:
        """Judge a trial, tell the study, and return its record."""
        import optuna

        verdict = self.goal.judge(chosen, measurement)
        record_constraints(trial, verdict.constraints)  # where optuna-dashboard reads them too
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
            return _failed(config, err, time.perf_counter() - t0)
        return m


@dataclass
class _Slot:
    """One trial of a batch: asked, told once the batch has run. ``measurement`` is known at
    once for a repeat of a measured config or a pruned one; ``None`` until measured."""

    trial: optuna.trial.Trial
    config: Config
    measurement: Measurement | None
    source: Source = field(default="measured")


def _failed(config: Config, err: BaseException, cost_s: float) -> Measurement:
    """The trial of a config whose run raised: out of memory, or an error."""
    from orchestrator.tuner.oom import is_oom

    status: Literal["oom", "error"] = "oom" if is_oom(err) else "error"
    log.info("trial %s failed: %s: %s", config, type(err).__name__, err)
    text = str(err).strip().splitlines()
    return Measurement(
        status,
        cost_s=cost_s,
        message=f"{type(err).__name__}: {text[0] if text else ''}"[:300],
    )


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
    best = history.cheapest  # the objective's own best: a service's tie-break is not progress
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


def _result(history: History, stopped: str, wall_s: float) -> TuneResult:
    best, closest = history.best, history.closest
    if best is not None:
        return TuneResult("feasible", best, closest, "", stopped, history, wall_s)
    reason = closest.verdict.reason if closest is not None else "no trial could run"
    return TuneResult("sla-infeasible", None, closest, reason, stopped, history, wall_s)


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
