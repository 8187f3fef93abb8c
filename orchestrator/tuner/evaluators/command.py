"""A command job's trial: a short run of the team's own script, sandboxed as a real run.

The trial runs the script through :func:`workers.command.run_command`, the code path a job
run of the script takes on a worker: unpacked into a private folder of the job's sandbox user
(a uid of its own when the tuner runs as root), run there as that user with the scrubbed
environment and the job context, never in the tuner's process. The context carries the
trial's settings: micro-batch, accumulation, precision, its step budget (``warmup_steps +
measured_steps``) and the script's declared settings (``workload.settings``) at the trial's
values. Its step reports are measured as a job run's are (:mod:`workers.steps`: warm-up steps
excluded, then step-time percentiles and samples/s), so a trial and the run it predicts
measure the same thing.

A script that fails (exits with an error, is not found, sends no step report within
``first_report_s``, or runs past ``trial_timeout_s``) raises its
:class:`~workers.errors.CommandError`, with its last output: the tuner records an infeasible
trial with that reason and goes on. It is an ``oom`` trial, pruned as a CUDA OOM is (no larger
micro-batch with its settings is tried), when its output names an out-of-memory error (CUDA's,
torch's CPU allocator's, Python's ``MemoryError``) or the kernel killed one of its processes
over the job's host memory (``resources.memory_gb``, which bounds a trial as it bounds a run:
``workers.sandbox.OutOfMemoryError``). Once the trial has its measured steps, the script is
asked to stop (it may ignore its step budget). One GPU here; trials on more GPUs run on the
pool's tuning gang (``evaluators.gang``), whose worker actors run the same
:func:`run_command` per rank.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from orchestrator.tuner.evaluators.base import Evaluator, measurement_of, trial_config
from orchestrator.tuner.objective import Measurement
from orchestrator.tuner.space import Config, DeviceCaps

__all__ = ["CommandEvaluator"]


class CommandEvaluator(Evaluator):
    """Profiles a command job's configs by running its script on this host (see module doc).

    Args:
        command: the job's ``HarnessConfig.command``
            (``orchestrator.runtime.harness_config.command_config``).
        workload_args: the job's ``workload.args`` (the script's ``ctx.args``).
        archive: the job's working directory as stored (each trial unpacks it afresh).
        caps: the device (``DeviceCaps.detect()`` by default; one GPU here).
        job_id: the job tuned (its sandbox uid is claimed under this id).
        warmup_steps: steps excluded from the figures.
        measured_steps: steps measured.
        num_threads: the script's CPU threads (``OMP_NUM_THREADS``; 1 = one virtual slot).
        seed: the job's seed.
        trial_timeout_s: a trial still running after this long is killed and counted failed.
        memory_gb, network: the job's ``resources``: the script's processes are bounded in a
            trial as in the job's runs (``workers.contain.limits_from_env``), so a config
            that runs out of the job's host memory is an out-of-memory trial.
    """

    def __init__(
        self,
        command: Mapping[str, Any],
        workload_args: Mapping[str, Any] | None,
        archive: bytes,
        *,
        caps: DeviceCaps | None = None,
        job_id: str = "tune",
        warmup_steps: int = 3,
        measured_steps: int = 10,
        num_threads: int | None = 1,
        seed: int = 0,
        trial_timeout_s: float = 600.0,
        memory_gb: float | None = None,
        network: bool = False,
    ) -> None:
        self.command = dict(command)
        self.workload_args = dict(workload_args or {})
        self.archive = archive
        self.caps = caps if caps is not None else DeviceCaps.detect(max_gpus=1)
        self.job_id = job_id
        self.warmup_steps = warmup_steps
        self.measured_steps = measured_steps
        self.num_threads = num_threads
        self.seed = seed
        self.trial_timeout_s = trial_timeout_s
        self.memory_gb = memory_gb
        self.network = network

    def forward_only(self) -> bool:
        """A command job trains (it reports optimizer steps): its global batch is kept."""
        return False

    def reads_dataset(self) -> bool:
        """The script may read its batches through ``job.loader``, with the loader's knobs
        from its context (``ctx.dataloader_kwargs``): the loader stage then runs when its
        trials' data wait is material, and never for a script whose trials report none
        (``loader_stage.data_wait_material``), so no probe is needed to tell."""
        return True

    def evaluate(self, config: Config) -> Measurement:
        """Run the script for ``warmup_steps + measured_steps`` steps at ``config``.

        Raises:
            CommandError: the script failed (the tuner records an infeasible trial).
        """
        if config.gpus > 1:
            return Measurement(
                "error", message="in-process profiling runs one GPU; multi-GPU trials need the pool"
            )
        from workers.command import run_command
        from workers.contain import limits_from_env

        run = trial_config(
            " ".join(self.command["argv"]),
            self.workload_args,
            config,
            warmup_steps=self.warmup_steps,
            measured_steps=self.measured_steps,
            seed=self.seed,
            command=self.command,
            memory_gb=self.memory_gb,
            network=self.network,
        )
        enough = threading.Event()

        def watch(report: dict[str, Any]) -> None:
            if int(report.get("measured_steps") or 0) >= self.measured_steps:
                enough.set()  # its budget is in: stop a script that would go on

        t0 = time.perf_counter()
        result = run_command(
            run,
            job_id=self.job_id,
            rank=0,
            world_size=1,
            init_method=None,
            checkpoint_dir=None,  # a private folder, gone after the trial
            report=watch,
            report_every_s=0.0,
            should_stop=enough.is_set,
            fence=lambda: True,
            num_threads=self.num_threads,
            archive=self.archive,
            time_limit_s=self.trial_timeout_s,
            limits=limits_from_env(self.memory_gb, self.network),
        )
        return measurement_of(result, time.perf_counter() - t0)
