"""Tuning one job spec end to end: space, goal, cache, study, trials, profile, verdict.

Used by ``orch tune`` (tune without running) and by the scheduler's tuning step. The report is
stored in ``JobStore.tune_reports`` for ``orch show``; the study (``JobStore.study_journal``),
the cache entry (``JobStore.tune_cache``) and the profile (``JobStore.profiles``) live beside it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from orchestrator.errors import TuneError
from orchestrator.run_config import Config
from orchestrator.spec import JobSpec
from orchestrator.tuner.cache import TuneCache, describe, fingerprint
from orchestrator.tuner.evaluators.base import Evaluator, EvaluatorLost
from orchestrator.tuner.job_space import space_for
from orchestrator.tuner.loader_stage import data_wait_material, tune_loader
from orchestrator.tuner.objective import Goal, Measurement
from orchestrator.tuner.profile import build_profile
from orchestrator.tuner.serving import service_space, service_warm_start
from orchestrator.tuner.space import DeviceCaps, SearchSpace
from orchestrator.tuner.strategies import STRATEGIES
from orchestrator.tuner.strategies.base import SearchStrategy
from orchestrator.tuner.study import objective_name, open_study, study_name
from orchestrator.tuner.tuner import OnTrial, Tuner, TuneResult, summary

if TYPE_CHECKING:
    import optuna

    from orchestrator.store.jobs import JobStore

__all__ = ["TuneReport", "command_evaluator", "stored_working_dir", "tune_spec"]

CacheStatus = Literal["hit", "warm", "miss", "off"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TuneReport:
    """What tuning a job decided.

    Attributes:
        job: the job id (or name) the study and profile are stored under.
        result: the tuner's result (trials, best, closest, verdict).
        cache: ``hit`` (no trial ran: the cached trials answered), ``warm`` (started from a
            similar job's configs), ``miss``, or ``off``.
        run: whether the job should run: the SLA is feasible, or the user accepts best effort.
        study: the Optuna study name.
        dropped: the plans and layouts the bounds allow that were left out of the search, each
            with its reason (``SearchSpace.dropped``).
    """

    job: str
    result: TuneResult
    cache: CacheStatus
    run: bool
    study: str
    dropped: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON data for ``orch show``."""
        trials = [
            {
                "number": r.number,
                "source": r.source,
                "config": r.config.to_dict(),
                "global_batch": r.config.global_batch,
                "measurement": r.measurement.to_dict(),
                "feasible": r.verdict.feasible,
                "value": r.verdict.value,
                "reason": r.verdict.reason,
            }
            for r in self.result.history.records
        ]
        return {
            **summary(self.result),
            "goal": self.result.history.goal.describe(),
            "cache": self.cache,
            "run": self.run,
            "study": self.study,
            "dropped": list(self.dropped),
            "trials_table": trials,
        }


def _forward_only(evaluator: Evaluator) -> bool:
    """What the workload says it is (its probe step). A probe that fails says nothing: the job
    is tuned as training, and its trials report the failure as they would have."""
    try:
        return evaluator.forward_only()
    except EvaluatorLost:
        raise
    except Exception as err:  # the workload's own failure: its trials will show it
        log.info(
            "the workload probe failed (%s: %s); tuning it as training", type(err).__name__, err
        )
        return False


def _check_servable(spec: JobSpec, evaluator: Evaluator) -> None:
    """A service answers with forward passes: a workload whose ``Workload`` trains is refused
    before any trial (the spec cannot tell for a team's ``entry:``, whose code the control
    plane never imports; the evaluator's probe runs it where its trials run).

    Raises:
        TuneError: the workload trains.
    """
    if not evaluator.forward_only():
        field = "workload.entry" if spec.workload.entry is not None else "workload.name"
        raise TuneError(
            f"{field}: {spec.workload.ref!r} is a training workload (its Workload has "
            "train=True); a service (serve:) needs a forward-only one (train=False)"
        )


def _sandbox_key(spec: JobSpec, job: str | None) -> str:
    """Whose sandbox uid a team's code runs under while it is tuned: the job's, or for a
    tuning with no job (``orch tune``) one of its own: a name is not unique (two teams' jobs
    named alike tuned at once on a host must not share a uid)."""
    import uuid

    return job or f"tune-{spec.team}-{spec.name}-{uuid.uuid4().hex[:8]}"


def _reads_dataset(evaluator: Evaluator) -> bool:
    """Whether the workload reads a dataset through the loader (the probe's answer; a failed
    probe says no: the loader's knobs are then left as the job set them)."""
    try:
        return evaluator.reads_dataset()
    except EvaluatorLost:
        raise
    except Exception:  # the workload's own failure: _forward_only logged it
        return False


def default_evaluator(
    spec: JobSpec,
    caps: DeviceCaps | None = None,
    *,
    job: str | None = None,
    store: tuple[str, str] | None = None,
) -> Evaluator:
    """In-process trials: a service's load tests (``ServeEvaluator``: replicas answering
    through ``store``'s ingress, ``(redis_url, namespace)``; a team's model in a sandboxed
    child), else harness runs (3 warm-up + 10 measured steps); one CPU thread."""
    if spec.serve is not None:
        from orchestrator.tuner.evaluators.serve import ServeEvaluator

        if store is None:
            raise ValueError("a service's trials go through the store's ingress: give store")
        return ServeEvaluator(
            spec.workload.ref,
            dict(spec.workload.args),
            spec.serve.harness(),
            redis_url=store[0],
            namespace=store[1],
            caps=caps,
            seed=spec.run.seed,
            job_id=_sandbox_key(spec, job),
        )
    from orchestrator.tuner.evaluators.harness import HarnessEvaluator

    return HarnessEvaluator(spec.workload.ref, spec.workload.args, caps=caps, seed=spec.run.seed)


def tune_spec(
    spec: JobSpec,
    store: JobStore,
    redis_url: str,
    *,
    job: str | None = None,
    strategy: str = "sla",
    evaluator: Evaluator | None = None,
    caps: DeviceCaps | None = None,
    use_cache: bool = True,
    fresh: bool = False,
    patience: int | None = 10,
    on_trial: OnTrial | None = None,
    free_gpus: int = 1,
    retune: bool = False,
    measured: Sequence[tuple[Config, Measurement]] = (),
) -> TuneReport:
    """Tune ``spec`` and store the study, cache entry, profile and report in Redis.

    Args:
        store: the namespace's store.
        redis_url: the URL of ``store``'s Redis (the Optuna journal opens its own connection).
        job: the key to store under (default: the spec's name).
        evaluator: what a trial is (default: :func:`default_evaluator`: in-process harness
            runs, 3 warm-up + 10 measured steps, one CPU thread; a service's trials are load
            tests, see ``orchestrator.tuner.serving``; for a command job, runs of its script on
            this host from its stored working directory: ``evaluators.command``).
        caps: device capabilities (default: the evaluator's).
        use_cache: read and write the tuning cache.
        fresh: start the study over instead of resuming it.
        free_gpus: GPUs the evaluator can run trials on at once (a tuning gang's size): up
            to this many one-GPU trials run together (``Tuner(free_gpus=...)``).
        retune: a re-tune of a job that ran (the SLA guard's, or asked for): the cache is not
            read (its entries are what the run contradicted) and the study is a new one beside
            the first (``tune-JOB-retune``), so the first tuning stays as it was in the
            dashboard.
        measured: a re-tune's warm start: what the job's running settings measured while it
            ran; they count as trials already made.

    Raises:
        TuneError: the bounds leave nothing to search.
        UnknownPolicyError: an unknown strategy name (lists the valid ones).
    """
    job = job or spec.name
    options = _Options(strategy, use_cache, fresh, patience, on_trial, free_gpus, retune, measured)
    if evaluator is None and spec.workload.command is not None:
        evaluator = command_evaluator(spec, stored_working_dir(store, spec), caps=caps, job=job)
        return _tune(spec, store, redis_url, job, evaluator, evaluator.caps, options)
    if evaluator is None:
        evaluator = default_evaluator(spec, caps, job=job, store=(redis_url, store.namespace))
    return _tune(spec, store, redis_url, job, evaluator, caps or evaluator.caps, options)


@dataclass(frozen=True)
class _Options:
    """How :func:`tune_spec` was asked to tune (its keyword arguments, see there)."""

    strategy: str
    use_cache: bool
    fresh: bool
    patience: int | None
    on_trial: OnTrial | None
    free_gpus: int
    retune: bool
    measured: Sequence[tuple[Config, Measurement]]


@dataclass(frozen=True)
class _Search:
    """What a tuning searches (its space) and how: the strategy's name, whether the tuning
    cache is used, and the configs tried first."""

    space: SearchSpace
    strategy: str
    use_cache: bool
    warm_start: list[Config]


def _tune(
    spec: JobSpec,
    store: JobStore,
    redis_url: str,
    job: str,
    evaluator: Evaluator,
    caps: DeviceCaps,
    options: _Options,
) -> TuneReport:
    """:func:`tune_spec` once its evaluator is known: the search, the cache, the trials, the
    loader stage, then the stored outcome."""
    search = _search_for(spec, evaluator, caps, options)
    space = search.space
    for reason in space.dropped:
        log.info("tuning %s: %s", job, reason)
    goal = Goal.from_spec(spec)
    chosen_strategy = STRATEGIES.create(search.strategy, seed=spec.run.seed)
    # a command's line says little (every team has a `python train.py`): its working
    # directory's digest names the code measured
    ref = " ".join(filter(None, (spec.workload.ref, spec.workload.working_dir)))
    descriptor = describe(ref, dict(spec.workload.args), caps)
    cache = TuneCache(store.tune_cache) if search.use_cache and not options.retune else None
    known, warm, status = _from_cache(
        cache, descriptor, space, goal, options.measured, search.warm_start
    )
    name = study_name(job) + ("-retune" if options.retune else "")
    fresh = options.fresh or options.retune
    budget = spec.tuning.budget
    tuner = Tuner(
        space,
        goal,
        evaluator,
        chosen_strategy,
        study=_open_study(store, redis_url, name, goal, chosen_strategy, fresh),
        max_trials=budget.trials,
        max_seconds=budget.seconds,
        patience=options.patience,
        warm_start=warm,
        known=known,
        on_trial=options.on_trial,
        free_gpus=options.free_gpus,
    )
    result = tuner.run()
    if data_wait_material(result, _reads_dataset(evaluator)):
        result = tune_loader(
            result,
            space,
            goal,
            evaluator,
            # a study of its own: Optuna fixes a parameter's choices within one study
            study=_open_study(store, redis_url, f"{name}-loader", goal, chosen_strategy, fresh),
            known=known,
            on_trial=options.on_trial,
            seed=spec.run.seed,
        )
    if status == "hit" and result.trials > 0:
        status = "warm"  # the cached trials did not settle this SLA: more were run
    if cache is not None:
        cache.put(
            descriptor,
            [(r.config, r.measurement) for r in result.history.points() if r.source == "measured"]
            + known,
        )
    return _store_outcome(spec, store, job, result, status, name, space)


def _search_for(
    spec: JobSpec, evaluator: Evaluator, caps: DeviceCaps, options: _Options
) -> _Search:
    """A service's search (load tests: see ``tuner.serving``), or a job's (its space as the
    evaluator's probe says: forward-only or training).

    Raises:
        TuneError: a service's workload trains, or the bounds leave nothing to search.
    """
    if spec.serve is None:
        space = space_for(spec, caps, forward_only=_forward_only(evaluator))
        return _Search(space, options.strategy, options.use_cache, [])
    _check_servable(spec, evaluator)
    # the sla strategy's model is one of step time, so a service's study is Optuna's own
    # sampler (TPE), and a load test's figures hold at its offered load only, so the cache
    # (keyed by workload and device) is not used
    space = service_space(spec, caps)
    strategy = "tpe" if options.strategy == "sla" else options.strategy
    return _Search(space, strategy, False, service_warm_start(space))


def _from_cache(
    cache: TuneCache | None,
    descriptor: dict[str, Any],
    space: SearchSpace,
    goal: Goal,
    measured: Sequence[tuple[Config, Measurement]],
    warm_start: list[Config],
) -> tuple[list[tuple[Config, Measurement]], list[Config], CacheStatus]:
    """The trials already known (a cache hit's within ``space``, whatever goal they were
    measured for, else a re-tune's ``measured``), the configs to try first (``warm_start``,
    and a similar job's best two each, within ``space``) and the cache's status."""
    known: list[tuple[Config, Measurement]] = list(measured)
    warm: list[Config] = list(warm_start)
    if cache is None:
        return known, warm, "off"
    entry = cache.get(fingerprint(descriptor))
    held = entry.within(space) if entry is not None else []
    if held:
        return held, warm, "hit"
    for other in cache.similar(descriptor):
        warm.extend(c for c in other.best(goal, n=2) if space.contains(c))
    return known, warm, "warm" if warm else "miss"


def _open_study(
    store: JobStore,
    redis_url: str,
    name: str,
    goal: Goal,
    strategy: SearchStrategy,
    fresh: bool,
) -> optuna.Study:
    """The study ``name`` in the namespace's journal, sampled by ``strategy``."""
    return open_study(
        store.study_journal(redis_url),
        name,
        goal.direction,
        strategy.sampler(),
        fresh=fresh,
        metric_name=objective_name(goal),
    )


def _store_outcome(
    spec: JobSpec,
    store: JobStore,
    job: str,
    result: TuneResult,
    status: CacheStatus,
    study: str,
    space: SearchSpace,
) -> TuneReport:
    """Save the job's profile and the tuning's report, and return the report."""
    chosen = result.chosen.config if result.chosen else None
    store.profiles.save(job, build_profile(result.history, chosen))
    report = TuneReport(
        job,
        result,
        status,
        result.status == "feasible" or spec.tuning.best_effort,
        study,
        space.dropped,
    )
    store.tune_reports.save(job, report.to_dict())
    return report


def stored_working_dir(store: JobStore, spec: JobSpec) -> bytes:
    """A command job's working directory, its archive as stored (each trial checks it against
    the job's digest and unpacks it for itself: ``workers.workdir``).

    Raises:
        TuneError: the store holds no working directory under the job's digest.
    """
    digest = spec.workload.working_dir
    data = store.working_dirs.get(digest) if digest else None
    if data is None:
        raise TuneError(f"workload.working_dir: the store holds no working directory {digest}")
    return data


def command_evaluator(
    spec: JobSpec, archive: bytes, *, caps: DeviceCaps | None = None, job: str | None = None
) -> Evaluator:
    """The evaluator of a command job's trials on this host, from its working directory's
    ``archive`` (``evaluators.command``: its script, sandboxed as a run)."""
    from orchestrator.runtime.harness_config import command_config
    from orchestrator.tuner.evaluators.command import CommandEvaluator

    command = command_config(spec.workload)
    assert command is not None  # a command job
    return CommandEvaluator(
        command,
        spec.workload.args,
        archive,
        caps=caps,
        job_id=_sandbox_key(spec, job),
        seed=spec.run.seed,
        memory_gb=spec.resources.memory_gb,
        network=spec.resources.network,
    )
