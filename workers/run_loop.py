"""The step loop of one harness run (:class:`RunLoop`): its data, its timed steps, its
checkpoints and what it reports. :class:`workers.harness.Harness` builds the workload and the
settings; see its module for the loop's sample indices and what is measured.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any, Protocol

import torch

from workers import distributed
from workers.checkpoint import (
    Checkpoint,
    load_checkpoint,
    load_tensors,
    restore_rng,
    rng_state,
    save_checkpoint,
)
from workers.devices import device_uuid, to_device
from workers.latency import LatencySketch
from workers.loader import RankLoader, open_loader
from workers.parallel import recipe
from workers.parallel import state as parallel_state
from workers.parallel.data_parallel import grad_sync
from workers.parallel.dims import ParallelDims
from workers.parallel.recipe import Parallelized
from workers.result import RunResult
from workers.runstats import RunMeter
from workers.serve_run import Replica
from workers.step_parts import StepClock, split
from workers.telemetry import NvmlSampler
from workers.window import RecentSteps
from workers.workloads.base import Batch

if TYPE_CHECKING:
    from workers.parallel import Plan


class Trainer(Replica, Protocol):
    """What a step run reads of the harness that built it (``workers.harness.Harness``:
    named by its shape, as :class:`~workers.serve_run.Replica` is, so this module does not
    import the harness that dispatches to it)."""

    init_method: str | None
    checkpoint_dir: str | None
    plan: Plan
    lr: float
    _scaler: torch.amp.GradScaler | None
    _run_tag: str

    @property
    def global_batch(self) -> int: ...


__all__ = ["RunLoop", "Trainer"]

log = logging.getLogger(__name__)


class RunLoop:
    """The mutable state of one :meth:`Harness.run` of a job that runs step by step (training,
    or an inference workload's forward passes), and its loop: kept apart so Harness stays a
    recipe. A service's run is :class:`workers.serve_run.ServeRun`."""

    def __init__(self, h: Trainer) -> None:
        self.h = h
        self.started = time.perf_counter()
        self.step = 0
        self.samples_seen = 0
        self.resumed_from: int | None = None
        self.loss: float | None = None
        # bounded at any step count: percentiles within the sketch's relative accuracy
        self.latency = LatencySketch()
        self.recent = RecentSteps()  # the last seconds of steps, for the SLA guard
        self.measured_samples = 0
        self.measured_time_s = 0.0
        self.local_steps = 0
        # Nothing reported yet, so the first step is reported at once: a job's first_step_at
        # reaches the store right after step 1 whatever report_every_s is.
        self.last_report = -float("inf")
        self.first_step_at: float | None = None
        self.checkpoint_path: str | None = None
        self.last_saved_step: int | None = None
        self.checkpoint_write_s: float | None = None
        # wall clock of the last checkpoint written: what a preemption would lose is the work
        # since then (the scheduler's victim choice reads it)
        self.checkpoint_at: float | None = None
        self.tokens_per_sample = h.workload.tokens_per_sample
        self.parallel: Parallelized | None = None  # the plan applied (training only)
        self.optimizer: torch.optim.Optimizer | None = None
        self.forward_module: torch.nn.Module = h.model
        self.data_rank = h.rank  # this rank's data-parallel replica (the plan's, once applied)
        self.nvml = NvmlSampler(device_uuid(h.device))
        # this run's figures (peak memory restarted here, not the worker process's peak)
        self.meter = RunMeter(h.device, self.nvml)
        self.loader: RankLoader | None = None  # a dataset workload's (built in execute)
        # a run for a set time: its clock starts with the step loop (see HarnessConfig) and
        # counts the run time of earlier runs, kept in the checkpoint
        self.deadline: float | None = None
        self.loop_started: float | None = None
        self.run_time_before = 0.0

    def execute(self) -> RunResult:
        h, cfg = self.h, self.h.config
        self.meter.peak.reset()
        if h.world_size > 1:
            assert h.init_method is not None  # checked in Harness.__init__
            distributed.init_group(h.device, h.init_method, h.rank, h.world_size)
        if h.workload.train:
            # the plan's recipe, optimizer and compile included (workers.parallel.recipe)
            dims = ParallelDims(h.plan, h.rank, h.device)
            self.parallel = recipe.parallelize(h.workload, h.plan, cfg, h.lr, dims)
            self.forward_module, self.optimizer = self.parallel.module, self.parallel.optimizer
            self.data_rank = dims.dp_rank
        elif cfg.compile:
            self.forward_module = torch.compile(self.forward_module)  # type: ignore[assignment]
        self._resume()  # every rank loads its part of the saved state (resharded by DCP)
        # a dataset workload's loader starts where the checkpoint's samples_seen says
        self.loader = open_loader(
            h.workload, cfg, self.data_rank, h.plan.dp, self.samples_seen, h.device
        )
        self.nvml.start()

        status = "finished"
        # set-up on a loaded machine can take longer than a short run: it does not count
        self.loop_started = time.perf_counter()
        if cfg.duration_s is not None:
            self.deadline = self.loop_started + max(0.0, cfg.duration_s - self.run_time_before)
        while cfg.steps is None or self.step < cfg.steps:
            stop, time_up, deposed = distributed.agree_any(
                [
                    h._should_stop(),
                    self.deadline is not None and time.perf_counter() >= self.deadline,
                    not h._fence(),
                ],
                h.device,
            )
            if deposed:  # a newer copy of this run owns the checkpoint and the reports
                log.warning("this run is no longer current: stopping without a checkpoint")
                return self._result("fenced")
            if stop:
                status = "stopped"
                break
            if time_up:
                break
            self._timed_step()
            if cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0:
                self._save()
            if time.perf_counter() - self.last_report >= h._report_every_s:
                self._emit("running")
        if self.loss is not None:
            self.loss = distributed.all_mean(self.loss, h.device)
        if h.checkpoint_dir is not None and self.last_saved_step != self.step:
            self._save()
        self._emit(status)
        return self._result(status)

    def close(self) -> None:
        self.nvml.stop()
        if self.loader is not None:
            self.loader.close()
        # DDP holds the process group: drop it first, so the group is torn down once, here,
        # and not later by a garbage-collected DDP after the peers are gone (which can hang).
        self.parallel = None
        self.forward_module = self.h.model
        distributed.shutdown_group()

    # -- one step -------------------------------------------------------------------------

    def _timed_step(self) -> None:
        h, cfg = self.h, self.h.config
        measured = self.local_steps >= cfg.warmup_steps
        w0 = time.perf_counter()
        if measured and not self.meter.measuring:
            self.meter.begin(w0)
        # The step's data is made before its clock starts: generating samples is the harness's
        # stand-in for a loader, not the job's step (rule 3), so it is data wait, reported apart.
        batches = [self._host_batch(k) for k in range(cfg.grad_accum)]
        self._sync()
        t0 = time.perf_counter()
        loss: float | None = None
        clock = StepClock(h.device)
        if h.workload.train:
            loss = self._train_step(batches, clock)
        else:
            self._infer_step(batches[0])
            clock.mark("one")
        self._sync()
        elapsed = time.perf_counter() - t0
        self.loss = loss
        self.step += 1
        self.samples_seen += h.global_batch
        self.local_steps += 1
        if self.first_step_at is None:
            self.first_step_at = time.time()  # wall clock: compared with submission times
        if self.local_steps > cfg.warmup_steps:
            self.latency.add(elapsed * 1000.0)
            self.measured_samples += h.global_batch
            self.measured_time_s += elapsed
            self.recent.add(t0 + elapsed, elapsed, h.global_batch)
            parts = split(clock.spans(), elapsed)
            self.meter.add(t0 - w0, elapsed, cfg.samples_per_rank_step, parts)

    def _train_step(self, batches: list[Batch], clock: StepClock) -> float:
        """One optimizer step over ``batches``; ``clock`` marks its phases
        (:mod:`workers.step_parts`)."""
        h, cfg = self.h, self.h.config
        optimizer, parallel = self.optimizer, self.parallel
        assert optimizer is not None and parallel is not None  # built for every training run
        optimizer.zero_grad(set_to_none=True)
        clock.mark("zero_grad")
        if parallel.pipeline is not None:  # micro-batches = the pipeline's (GPipe)
            step_loss = parallel.pipeline.step(
                [to_device(b, h.device) for b in batches], h._autocast
            )
            clock.mark("pipeline")
            optimizer.step()
            clock.mark("optimizer")
            return step_loss
        synced = parallel.synced
        accum = cfg.grad_accum
        replicas = h.plan.dp > 1
        total: torch.Tensor | None = None
        for k in range(accum):
            # Moved to the device one micro-batch at a time, as it is used: the copy is the
            # step's work, and accumulation keeps only one micro-batch's inputs on the device.
            batch = to_device(batches[k], h.device)
            # Gradients are synced (all-reduced, or reduce-scattered under FSDP) only on the
            # last micro-batch; earlier ones accumulate locally, which is what makes
            # accumulation cheaper than a bigger sync count.
            with grad_sync(synced, enabled=k == accum - 1):
                with h._autocast():
                    loss = h.workload.loss(self.forward_module, batch)
                    if accum > 1:  # no extra tensor op per step without accumulation
                        loss = loss / accum
                (h._scaler.scale(loss) if h._scaler is not None else loss).backward()
            part = loss.detach().float()
            total = part if total is None else total + part
            clock.mark("one" if not replicas else "synced" if k == accum - 1 else "micro")
        if h._scaler is not None:
            h._scaler.step(optimizer)
            h._scaler.update()
        else:
            optimizer.step()
        clock.mark("optimizer")
        assert total is not None  # grad_accum >= 1
        return float(total.item())

    def _infer_step(self, batch: Batch) -> None:
        h = self.h
        with torch.inference_mode(), h._autocast():
            h.workload.loss(self.forward_module, to_device(batch, h.device))

    def _host_batch(self, k: int) -> Batch:
        """Micro-batch ``k`` of this rank's share of the next step, as the workload makes it."""
        h, cfg = self.h, self.h.config
        if self.loader is not None:  # it yields this rank's micro-batches in this order
            return self.loader.next()
        first = self.samples_seen + (self.data_rank * cfg.grad_accum + k) * cfg.micro_batch
        return h.workload.make_batch(first, cfg.micro_batch)

    def _sync(self) -> None:
        if self.h.device.type == "cuda":
            torch.cuda.synchronize(self.h.device)

    # -- checkpoints ----------------------------------------------------------------------

    def _resume(self) -> None:
        h = self.h
        if h.checkpoint_dir is None:
            return
        ckpt = load_checkpoint(h.checkpoint_dir, h.config.workload, h.config.workload_args)
        if ckpt is None:
            return
        # this rank's (sharded) state dicts, filled in from the checkpoint's shards
        state = parallel_state.state_dicts(h.model, self.optimizer)
        self.checkpoint_path = load_tensors(h.checkpoint_dir, ckpt, state)
        parallel_state.load_state_dicts(h.model, self.optimizer, state)
        if h._scaler is not None and ckpt.scaler:
            h._scaler.load_state_dict(ckpt.scaler)
        restore_rng(ckpt.rng)
        self.step = self.resumed_from = ckpt.step
        self.samples_seen = ckpt.samples_seen
        self.latency.merge(LatencySketch.from_state(ckpt.latency))
        self.measured_samples = ckpt.measured_samples
        self.measured_time_s = ckpt.measured_time_s
        self.run_time_before = ckpt.run_time_s
        self.last_saved_step = ckpt.step

    def run_time_s(self, now: float) -> float:
        """Step-loop time of every run of the job up to ``now`` (a ``perf_counter`` value)."""
        if self.loop_started is None:
            return self.run_time_before
        return self.run_time_before + max(0.0, now - self.loop_started)

    def _save(self) -> None:
        h = self.h
        if h.checkpoint_dir is None:
            return
        self.last_saved_step = self.step
        t0 = time.perf_counter()
        ckpt = Checkpoint(
            step=self.step,
            samples_seen=self.samples_seen,
            workload=h.config.workload,
            workload_args=dict(h.config.workload_args),
            scaler=h._scaler.state_dict() if h._scaler is not None else {},
            rng=rng_state(),
            latency=self.latency.state(),
            measured_samples=self.measured_samples,
            measured_time_s=self.measured_time_s,
            run_time_s=self.run_time_s(t0),
        )
        # On every rank: each writes its own shards, in parallel (rank 0 commits the record).
        state = parallel_state.state_dicts(h.model, self.optimizer)
        written = save_checkpoint(
            h.checkpoint_dir, ckpt, state, run_tag=h._run_tag, may_commit=h._fence
        )
        if written is None:  # deposed since the last step: the record stays the newer run's
            return
        self.checkpoint_path = written
        self.checkpoint_write_s = time.perf_counter() - t0
        self.checkpoint_at = time.time()

    # -- measurement ----------------------------------------------------------------------

    def _metrics(self) -> dict[str, Any]:
        lat = self.latency
        sps = self.measured_samples / self.measured_time_s if self.measured_time_s > 0 else None
        tps = sps * self.tokens_per_sample if sps is not None and self.tokens_per_sample else None
        return {
            "p50_ms": lat.quantile(0.50),
            "p95_ms": lat.quantile(0.95),
            "p99_ms": lat.quantile(0.99),
            "samples_per_s": sps,
            "tokens_per_s": tps,
            # the data wait is the loader's (the job's own data), not the harness's generator:
            # what the job's work goes at is then samples_per_s x (1 - data_wait_share)
            "reads_dataset": self.loader is not None,
            "measured_steps": lat.count,
            **self.meter.summary(time.perf_counter()),
            **self.recent.summary(time.perf_counter()),
        }

    def _emit(self, status: str) -> None:
        h = self.h
        self.last_report = time.perf_counter()
        if h._report is None:
            return
        report: dict[str, Any] = {
            "status": status,
            "step": self.step,
            "total_steps": h.config.steps,
            "elapsed_s": time.perf_counter() - self.started,
            "loss": self.loss,
            "device": str(h.device),
            "rank": h.rank,
            "world_size": h.world_size,
            "global_batch": h.global_batch,
            "warmup_steps": h.config.warmup_steps,
            "first_step_at": self.first_step_at,
            "checkpoint_write_s": self.checkpoint_write_s,
            "checkpoint_at": self.checkpoint_at,
            # a run for a set time (``duration_s``): what is left of it, the remaining work
            "time_left_s": None
            if self.deadline is None
            else max(0.0, self.deadline - time.perf_counter()),
            **self._metrics(),
            **self.nvml.snapshot(),
        }
        try:
            h._report(report)
        except Exception:
            # A failing metrics sink (Redis briefly down) must not kill hours of training.
            log.warning("report callback failed; the run continues", exc_info=True)

    def _result(self, status: str) -> RunResult:
        h = self.h
        # full parameters, also sharded; of every stage under a pipeline
        stages = self.parallel.dims.group("pp") if self.parallel and h.plan.pp > 1 else None
        fingerprint = parallel_state.param_fingerprint(h.model, stages)
        # the measured figures (percentiles, throughput, this run's meter), by field name
        names = {f.name for f in dataclasses.fields(RunResult)}
        measured = {k: v for k, v in self._metrics().items() if k in names}
        return RunResult(
            status=status,
            steps_done=self.step,
            resumed_from_step=self.resumed_from,
            loss=self.loss,
            **measured,
            warmup_steps=h.config.warmup_steps,
            elapsed_s=time.perf_counter() - self.started,
            device=str(h.device),
            world_size=h.world_size,
            global_batch=h.global_batch,
            param_fingerprint=fingerprint,
            telemetry=self.nvml.snapshot(),
            checkpoint_path=self.checkpoint_path,
            first_step_at=self.first_step_at,
            checkpoint_write_s=self.checkpoint_write_s,
            forward_only=not h.workload.train,
            dataset=self.loader is not None,
        )
