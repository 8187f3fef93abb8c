"""The worker harness: runs any workload's training (or inference) loop and measures it.

The harness owns the loop; a workload owns only the model (rule 3). For an optimizer step the
harness draws ``grad_accum`` micro-batches of ``micro_batch`` samples on each of ``world_size``
ranks, runs them under the configured precision, with activation checkpointing and
torch.compile when asked, spreads the model over the ranks by the config's parallel plan (data,
tensor and pipeline parallelism, ZeRO stage: :mod:`workers.parallel`) and times the step. The step's
data is made before its clock starts and reported as data wait, apart from the step; peak memory,
busy share and energy are this run's (:mod:`workers.runstats`).

Sample indices: the step that starts at global sample ``s`` gives data-parallel replica ``r``'s
micro-batch ``k`` the samples ``s + (r * grad_accum + k) * micro_batch`` onwards (every rank of
a replica, its tensor and pipeline peers, reads the same). Every step reads the next
``micro_batch * grad_accum * dp`` samples of the stream whatever its split, so gradient
accumulation, data parallelism and resumption all see exactly the data one large batch would.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from workers.config import HarnessConfig
from workers.devices import resolve_device
from workers.errors import HarnessConfigError
from workers.optimizations import (
    autocast_context,
    make_grad_scaler,
    scaled_lr,
)
from workers.parallel import Plan, recipe
from workers.result import RunResult
from workers.run_loop import RunLoop
from workers.workloads.registry import build_workload

__all__ = ["Harness", "HarnessConfig", "RunResult"]

Report = Callable[[dict[str, Any]], None]


class Harness:
    """Runs one rank of a job: builds the workload, then :meth:`run` loops and measures.

    Args:
        config: what to run and how.
        rank: this process's data-parallel rank.
        world_size: number of ranks; above 1 the harness joins a process group at
            ``init_method`` and, for training, spreads the model over the ranks by
            ``config.plan`` (or ``config.sharding``: DDP or FSDP over every rank).
        init_method: ``tcp://host:port`` of rank 0 (required when ``world_size > 1``).
        device: ``cpu``, ``cuda`` or ``cuda:N``; by default ``cuda:rank % n_gpus`` when CUDA is
            present, else ``cpu``.
        checkpoint_dir: where checkpoints are written and resumed from (every rank): a path
            shared by the ranks, or an fsspec URL (``s3://...``); see :mod:`workers.checkpoint`.
        report: called with a report dict at most every ``report_every_s`` and once at the end.
        report_every_s: minimum seconds between two periodic reports.
        should_stop: polled once per optimizer step; when it returns True on any rank, all
            ranks checkpoint (rank 0 writes) and return with status ``stopped``.
        num_threads: intra-op CPU threads (``torch.set_num_threads``), e.g. 1 per virtual GPU.
        fence: whether this run is still the job's current one (its scheduler still holds the
            lease it was launched under); polled once per optimizer step and before each
            checkpoint commit. When it says ``False`` on any rank, every rank returns with
            status ``fenced`` at once: no checkpoint, no report (a newer copy of the run owns
            them). Give it to rank 0 alone; ``None``: always current.
        run_tag: this run's tag in its checkpoint files (``workers.checkpoint.run_tag``).
        requests: a service endpoint's request queue (``serve.endpoint``; see
            :mod:`workers.serve_endpoint`), handed over by the trusted worker.

    Attributes:
        lr: the optimizer's learning rate, ``config.lr`` scaled to this run's global batch by
            ``config.lr_scaling`` (:func:`workers.optimizations.scaled_lr`).

    Raises:
        HarnessConfigError: an impossible setting (fp16 where autocast lacks it, a missing
            ``init_method``, accumulation on an inference workload, a bad rank, ``script``
            learning-rate scaling for a workload without ``scale_lr``).
        WorkloadError: the workload cannot be resolved or built.
    """

    def __init__(
        self,
        config: HarnessConfig,
        *,
        rank: int = 0,
        world_size: int = 1,
        init_method: str | None = None,
        device: str | None = None,
        checkpoint_dir: Path | str | None = None,
        report: Report | None = None,
        report_every_s: float = 1.0,
        should_stop: Callable[[], bool] | None = None,
        num_threads: int | None = None,
        fence: Callable[[], bool] | None = None,
        run_tag: str = "",
        requests: Any = None,
    ) -> None:
        if world_size < 1 or not 0 <= rank < world_size:
            raise HarnessConfigError(f"rank must be in [0, {world_size}), got {rank}")
        if world_size > 1 and not init_method:
            raise HarnessConfigError("world_size > 1 needs init_method ('tcp://host:port')")
        self.config = config
        self.rank = rank
        self.world_size = world_size
        self.init_method = init_method
        # a string, not a Path: a URL's "//" would not survive Path()
        self.checkpoint_dir = str(checkpoint_dir) if checkpoint_dir is not None else None
        self._report = report
        self._report_every_s = report_every_s
        self._should_stop = should_stop or (lambda: False)
        self._fence = fence or (lambda: True)
        self._run_tag = run_tag
        self._requests = requests  # a service endpoint's queue (workers.serve_endpoint)
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        self.device = resolve_device(device, rank)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self._autocast = autocast_context(config.precision, self.device)

        # Same seed on every rank: identical initial weights (DDP also broadcasts rank 0's;
        # FSDP shards each rank's own copy, so this is what keeps the shards consistent).
        random.seed(config.seed)
        torch.manual_seed(config.seed)
        self.workload = build_workload(config.workload, config.workload_args, config.seed)
        if not self.workload.train and config.grad_accum != 1:
            raise HarnessConfigError(
                f"grad_accum must be 1 for the inference workload {config.workload!r}, "
                f"got {config.grad_accum}"
            )
        self.plan = self._plan(config, world_size)
        if config.work_tokens is not None:
            config = self.config = self._steps_for_tokens(config, world_size)
        self._model = self.workload.model.to(self.device)
        self._model.train(self.workload.train)
        self._scaler = make_grad_scaler(config.precision, self.device)
        self.lr = scaled_lr(config, self.global_batch, self.workload.scale_lr)
        self._ran = False

    def _plan(self, config: HarnessConfig, world_size: int) -> Plan:
        """The parallel plan of a training run (an inference run: one replica per rank)."""
        if config.plan is None or not self.workload.train:
            return Plan.data_parallel(world_size, config.sharding)
        plan = Plan.from_dict(config.plan)
        recipe.check(plan, self.workload, config, world_size, self.device)
        return plan

    def _steps_for_tokens(self, config: HarnessConfig, world_size: int) -> HarnessConfig:
        """The config with ``work_tokens`` turned into optimizer steps for this workload."""
        per_sample = self.workload.tokens_per_sample
        if per_sample <= 0:
            raise HarnessConfigError(
                f"work_tokens needs a workload that counts tokens; {config.workload!r} does not "
                "(state the work in samples, or a run length in steps or seconds)"
            )
        per_step = config.samples_per_rank_step * self.plan.dp * per_sample
        steps = max(1, math.ceil((config.work_tokens or 0) / per_step))
        return dataclasses.replace(config, steps=steps, work_tokens=None)

    @property
    def model(self) -> torch.nn.Module:
        """The workload's model, unwrapped (no DDP, no compile).

        Under FSDP it is sharded in place once :meth:`run` starts: its parameters are then
        DTensors holding this rank's shard (:func:`workers.parallel.state.full_parameters`
        gathers them).
        """
        return self._model

    @property
    def global_batch(self) -> int:
        """Samples per optimizer step over all ranks (``dp`` replicas of the plan)."""
        return self.config.samples_per_rank_step * self.plan.dp

    def run(self) -> RunResult:
        """Run to ``steps`` (or for ``duration_s``) or until stopped; return the outcome.

        A harness runs once; build a new one (same ``checkpoint_dir``) to resume.
        """
        if self._ran:
            raise RuntimeError("Harness.run() can be called once; build a new Harness to resume")
        self._ran = True
        if self.config.serve is not None:
            from workers.serve_run import ServeRun

            if self.config.serve.get("endpoint"):
                from workers.serve_endpoint import EndpointServe

                return EndpointServe(self, self._requests).execute()
            return ServeRun(self).execute()
        run = RunLoop(self)
        try:
            return run.execute()
        finally:
            run.close()
