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

:meth:`Evaluator.forward_only` says whether the workload is forward-only (it learns nothing, so
its space has accumulation 1 and no global batch to keep). An evaluator that runs the workload
asks the workload itself, with one probe step (:func:`probe_config`): a property of the
workload, not of its name.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.runtime.harness_config import harness_config
from orchestrator.tuner.objective import Measurement
from orchestrator.tuner.space import Config, DeviceCaps

__all__ = ["Evaluator", "EvaluatorLost", "measurement_of", "probe_config", "trial_config"]


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

    def forward_only(self) -> bool:
        """Whether the workload is forward-only (``Workload.train`` is False). This default
        (a table of training runs) says no; an evaluator that runs the workload asks it."""
        return False

    def reads_dataset(self) -> bool:
        """Whether the workload gives a dataset that the harness's loader reads, so the
        loader's knobs can change its speed (the same probe as :meth:`forward_only`). This
        default (a table) says no."""
        return False

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


def probe_config(workload: str, workload_args: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """The harness configuration of the probe that asks a workload what it is: one step at
    micro-batch 1 without accumulation (which any workload, training or forward-only, can
    run); its ``RunResult.forward_only`` is the answer (and ``RunResult.dataset`` whether the
    harness read a dataset through its loader)."""
    return harness_config(workload, workload_args, Config(1), steps=1, warmup_steps=0, seed=seed)


def trial_config(
    workload: str,
    workload_args: Mapping[str, Any],
    config: Config,
    *,
    warmup_steps: int,
    measured_steps: int,
    seed: int,
    command: Mapping[str, Any] | None = None,
    memory_gb: float | None = None,
    network: bool = False,
) -> dict[str, Any]:
    """The harness configuration of one trial of ``config``: ``warmup_steps +
    measured_steps`` steps, no checkpoints, the config's parallel plan. For a command job
    (``command``: its ``HarnessConfig.command``), the script's settings at the config's
    values (:meth:`Config.script_settings`). ``memory_gb`` and ``network``: the job's
    ``resources``, which bound a team's code in a trial as in the job's runs (a config that
    runs out of the job's host memory is out of memory in its trial too)."""
    run = harness_config(
        workload,
        workload_args,
        config,
        steps=warmup_steps + measured_steps,
        warmup_steps=warmup_steps,
        seed=seed,
        plan=config.plan(),
    )
    if command is not None:
        settings = {**command.get("settings", {}), **config.script_settings()}
        run["command"] = {**command, "settings": settings}
    run["memory_gb"], run["network"] = memory_gb, network
    return run


def measurement_of(result: Mapping[str, Any], cost_s: float) -> Measurement:
    """A trial's measurement from its run's ``RunResult.to_dict()`` (rank 0's)."""
    return Measurement(
        "ok",
        p50_ms=result.get("p50_ms"),
        p95_ms=result.get("p95_ms"),
        p99_ms=result.get("p99_ms"),
        samples_per_s=result.get("samples_per_s"),
        tokens_per_s=result.get("tokens_per_s"),
        peak_mem_mb=result.get("peak_mem_mb"),
        data_wait_share=result.get("data_wait_share"),
        gpu_busy_share=result.get("gpu_busy_share"),
        energy_per_sample_j=result.get("energy_per_sample_j"),
        cost_s=cost_s,
        data_wait_ms=result.get("data_wait_ms"),
        fwd_bwd_ms=result.get("fwd_bwd_ms"),
        comm_ms=result.get("comm_ms"),
        optimizer_ms=result.get("optimizer_ms"),
        step_other_ms=result.get("step_other_ms"),
    )
