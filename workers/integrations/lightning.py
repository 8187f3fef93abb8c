"""Lightning under ``orch``: the tuned settings as the ``Trainer``'s own arguments, and a
callback that reports steps, checkpoints through the Trainer and stops on preemption.

A Lightning script changes three lines::

    from workers.integrations import lightning as orch        # + the import
    trainer = orch.trainer(max_epochs=3, ...)                  # ~ was L.Trainer(max_epochs=3, ...)
    trainer.fit(model, ckpt_path=orch.resume_checkpoint())    # ~ was trainer.fit(model)

:func:`trainer` is ``L.Trainer(**trainer_kwargs(...))``.
:func:`trainer_kwargs` returns the team's keyword arguments with, from
:func:`workers.job.context`: ``precision`` (``bf16-mixed``, ``16-mixed`` or ``32-true``),
``accumulate_grad_batches``, ``max_steps`` (the job's steps, ``max_epochs=-1``),
``accelerator``, ``devices=1`` and ``num_nodes`` = the ranks with ``strategy`` ``ddp`` (or
``fsdp`` when the run's sharding is fsdp, on GPUs: Lightning refuses it on CPU) on more than
one rank, ``default_root_dir`` (the job's checkpoint folder) and :class:`OrchCallback` added to
``callbacks``. Each rank is a
process of its own with torchrun's variables (``RANK``, ``WORLD_SIZE``, ``GROUP_RANK``,
``LOCAL_RANK=0``, ``LOCAL_WORLD_SIZE=1``...: :func:`workers.command.torchrun_env`), which
Lightning's ``TorchElasticEnvironment`` reads: one device a node, a node a rank. Outside
``orch`` the arguments are returned as given.

The micro-batch reaches the module the way Lightning's own batch-size finder sets it: the
LightningModule's (or its DataModule's) ``batch_size`` attribute or ``hparams.batch_size``,
set before ``train_dataloader()`` is called; a module with neither is refused under ``orch``
(its loader's batch size would not be the job's).

:class:`OrchCallback` reports each optimizer step (the job's global batch, the step's loss,
tokens when told the sequence length); when ``orch`` asks for a checkpoint (every
``run.checkpoint_every`` steps, or a stop) it calls ``trainer.save_checkpoint`` (``step-N.ckpt``
in the job's folder: model, optimizer, loops) and on a stop sets ``trainer.should_stop``; every
rank decides the same at the same step (:mod:`workers.integrations.lifecycle`). A run resumed
mid-epoch from such a checkpoint reads and drops the batches the stopped run had taken in that
epoch (Lightning restarts the epoch's loader otherwise), so it trains on the same samples in
the same order.
"""

from __future__ import annotations

import os
import time
from typing import Any

from workers.integrations import missing_extra

try:
    import lightning.pytorch as pl
    from lightning.pytorch.utilities.parsing import lightning_hasattr, lightning_setattr
except ImportError as err:  # the framework is an extra: say which
    raise missing_extra("lightning", "lightning") from err

from workers import job
from workers.integrations.lifecycle import decide

__all__ = ["PRECISIONS", "OrchCallback", "resume_checkpoint", "trainer", "trainer_kwargs"]

PRECISIONS = {"bf16": "bf16-mixed", "fp16": "16-mixed", "fp32": "32-true"}
"""``orch``'s precision to Lightning's."""


def trainer_kwargs(*, seq_len: int | None = None, **kwargs: Any) -> dict[str, Any]:
    """The team's ``Trainer`` keyword arguments with this run's settings (see the module doc);
    as given outside ``orch``. ``seq_len``: tokens per sample, for :class:`OrchCallback`."""
    if not job.under_orch():
        return kwargs
    import torch

    ctx = job.context()
    cuda = torch.cuda.is_available()
    settings: dict[str, Any] = {
        "precision": PRECISIONS[ctx.precision],
        "accumulate_grad_batches": ctx.grad_accum,
        "accelerator": "gpu" if cuda else "cpu",
        "devices": 1,
        "num_nodes": ctx.world_size,
        "strategy": _strategy(ctx, cuda),
        "default_root_dir": ctx.checkpoint_dir,
    }
    if ctx.steps is not None:
        settings.update(max_steps=ctx.steps, max_epochs=-1)
    callbacks = list(kwargs.get("callbacks") or [])
    if not any(isinstance(c, OrchCallback) for c in callbacks):
        callbacks.append(OrchCallback(seq_len))
    return {**kwargs, **settings, "callbacks": callbacks}


def trainer(*, seq_len: int | None = None, **kwargs: Any) -> pl.Trainer:
    """``lightning.pytorch.Trainer(**kwargs)`` with this run's settings: see
    :func:`trainer_kwargs`."""
    return pl.Trainer(**trainer_kwargs(seq_len=seq_len, **kwargs))


def _strategy(ctx: job.JobContext, cuda: bool) -> str:
    """``ddp`` on more than one rank, ``fsdp`` when the run shards, on GPUs: Lightning refuses
    FSDP on CPU, where the run trains with DDP (as Accelerate does for the HF Trainer)."""
    if ctx.world_size == 1:
        return "auto"
    return "fsdp" if ctx.sharding == "fsdp" and cuda else "ddp"


def checkpoint_path(step: int) -> str:
    """Where the callback saves the checkpoint of ``step``."""
    return os.path.join(job.context().checkpoint_dir, f"step-{step}.ckpt")


def resume_checkpoint() -> str | None:
    """The checkpoint this run resumes from, for ``trainer.fit(..., ckpt_path=...)``: the one
    ``orch`` recorded last, or ``None`` (a first run, or outside ``orch``)."""
    ctx = job.context()
    if not (job.under_orch() and ctx.resume and ctx.resume_step):
        return None
    path = checkpoint_path(ctx.resume_step)
    return path if os.path.isfile(path) else None


class OrchCallback(pl.Callback):
    """Reports each optimizer step to ``orch``, checkpoints when asked and stops on
    preemption (see the module doc).

    Args:
        seq_len: tokens per sample: each step then reports ``global batch x seq_len`` tokens.
    """

    def __init__(self, seq_len: int | None = None) -> None:
        self.seq_len = seq_len
        self.last_step = 0
        self.started = time.monotonic()

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit" or not job.under_orch():
            return
        if not lightning_hasattr(pl_module, "batch_size"):
            raise ValueError(
                "orch sets the micro-batch through the LightningModule's (or its "
                "DataModule's) `batch_size` attribute or `hparams.batch_size`, as Lightning's "
                "batch-size finder does: give it one and build train_dataloader() with it"
            )
        lightning_setattr(pl_module, "batch_size", job.context().micro_batch)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.started = time.monotonic()
        self.last_step = trainer.global_step
        job.should_stop()  # from now on orch asks this script to stop instead of ending it
        _skip_taken_batches(trainer)

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        step = trainer.global_step
        if step == self.last_step:  # a micro-batch of an accumulation: no optimizer step yet
            return
        self.last_step = step
        ctx = job.context()
        samples = ctx.global_batch if job.under_orch() else 0
        job.report(
            samples=samples,
            tokens=samples * self.seq_len if self.seq_len else None,
            loss=_loss(outputs),
            step=step,
        )
        late = ctx.duration_s is not None and time.monotonic() - self.started >= ctx.duration_s
        decision = decide(step, late, pl_module.device)  # the same on every rank
        if decision.save:
            trainer.save_checkpoint(checkpoint_path(step))
            job.checkpointed(step)
        if decision.stop:
            trainer.should_stop = True


def _skip_taken_batches(trainer: pl.Trainer) -> None:
    """On a resume mid-epoch, read and drop the batches the stopped run had taken in the
    epoch: Lightning restarts a loader without ``state_dict`` from its first batch but counts
    those as done, so the run would see the epoch's first batches twice and its last never."""
    loop = trainer.fit_loop
    # processed, not completed: the callback saves in on_train_batch_end, between the two
    current = loop.epoch_loop.batch_progress.current  # a _ProcessedTracker at run time
    taken = int(getattr(current, "processed", current.completed))
    fetcher = loop._data_fetcher
    if not loop.restarting or taken <= 0 or fetcher is None or fetcher.iterator is None:
        return
    if taken >= trainer.num_training_batches:  # saved at the epoch's end: a new epoch follows
        return
    for _ in range(taken):
        next(fetcher.iterator)


def _loss(outputs: Any) -> float | None:
    loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
    return float(loss) if loss is not None else None
