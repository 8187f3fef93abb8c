"""Hugging Face ``Trainer`` under ``orch``: the tuned settings in ``TrainingArguments``, and a
callback that reports steps, checkpoints through the Trainer and stops on preemption.

A Trainer script changes three lines::

    from workers.integrations import hf                  # + the import
    args = TrainingArguments(output_dir="out", ...)
    args = hf.training_arguments(args)                   # + orch's settings in the arguments
    trainer = Trainer(model=model, args=args, train_dataset=data)
    hf.train(trainer)                                    # ~ was trainer.train()

:func:`train` adds :class:`OrchCallback` and resumes from :func:`resume_checkpoint`; a script
that wants them apart passes ``callbacks=[hf.OrchCallback()]`` and
``trainer.train(resume_from_checkpoint=hf.resume_checkpoint())`` itself.

:func:`training_arguments` sets, from :func:`workers.job.context`: ``per_device_train_batch_size``
(the micro-batch), ``gradient_accumulation_steps``, ``bf16``/``fp16``, ``gradient_checkpointing``,
``torch_compile``, the loader's ``dataloader_*`` knobs, ``max_steps`` (the job's steps),
``output_dir`` (the job's checkpoint folder) and ``save_strategy`` (``"no"``: the callback saves
when ``orch`` asks), and FSDP (full sharding, :func:`_fsdp`) when the run's sharding is fsdp on
more than one rank (on GPUs only: Accelerate trains a CPU run with DDP whatever ``fsdp``
says). The ranks come from the variables ``orch`` gives each process (``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``...: :func:`workers.command.torchrun_env`), which
Accelerate reads as under ``torchrun``. Outside ``orch`` the arguments are returned as given.

:class:`OrchCallback` reports each optimizer step (``job.report``: the Trainer's global batch,
tokens when told the sequence length or when the Trainer counts them, the last logged loss),
and when ``orch`` asks for a checkpoint (every ``run.checkpoint_every`` steps, or a stop) sets
``control.should_save`` (the Trainer writes ``checkpoint-N``: model, optimizer, scheduler, RNG
and data position) and, on a stop, ``control.should_training_stop``; every rank decides the
same at the same step (:mod:`workers.integrations.lifecycle`). :func:`resume_checkpoint` is
the checkpoint ``orch`` recorded last, for ``trainer.train(resume_from_checkpoint=...)``.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

from workers.integrations import missing_extra

try:
    from transformers import Trainer, TrainerCallback, TrainingArguments
except ImportError as err:  # the framework is an extra: say which
    raise missing_extra("transformers", "hf") from err

from workers import job
from workers.integrations.lifecycle import decide

__all__ = ["OrchCallback", "resume_checkpoint", "train", "training_arguments"]

CHECKPOINT_PREFIX = "checkpoint"
"""The Trainer's checkpoint folders: ``checkpoint-<global step>`` in ``output_dir``."""


def training_arguments(args: TrainingArguments | dict[str, Any]) -> TrainingArguments:
    """``args`` with this run's settings applied (see the module doc); unchanged outside
    ``orch`` (a dict made into ``TrainingArguments``)."""
    changes = _settings(job.context()) if job.under_orch() else {}
    if isinstance(args, dict):
        return TrainingArguments(**{**args, **changes})
    return dataclasses.replace(args, **changes) if changes else args


def _settings(ctx: job.JobContext) -> dict[str, Any]:
    """The ``TrainingArguments`` fields ``orch`` sets for this run."""
    import torch

    loader = ctx.dataloader_kwargs
    workers = loader["num_workers"]
    settings: dict[str, Any] = {
        "per_device_train_batch_size": ctx.micro_batch,
        "gradient_accumulation_steps": ctx.grad_accum,
        "bf16": ctx.precision == "bf16",
        "fp16": ctx.precision == "fp16",
        "gradient_checkpointing": ctx.activation_checkpointing,
        "torch_compile": ctx.compile,
        "dataloader_num_workers": workers,
        "dataloader_pin_memory": loader["pin_memory"],
        "dataloader_prefetch_factor": loader.get("prefetch_factor") if workers else None,
        "dataloader_persistent_workers": bool(loader.get("persistent_workers")),
        "output_dir": ctx.checkpoint_dir,
        "save_strategy": "no",  # the callback saves when orch asks (checkpoint_every, stop)
        "use_cpu": not torch.cuda.is_available(),  # the Trainer refuses bf16 on CPU without
    }
    if ctx.steps is not None:
        settings["max_steps"] = ctx.steps
    if ctx.sharding == "fsdp" and ctx.world_size > 1:
        settings.update(_fsdp())
    return settings


def _fsdp() -> dict[str, Any]:
    """The Trainer's options for full sharding, each block a unit (its default wrap policy):
    ``fsdp=True`` with FSDP2's ``reshard_after_forward`` from transformers 5 on (the string
    form is deprecated there), ``"full_shard auto_wrap"`` before."""
    import transformers

    if int(transformers.__version__.split(".")[0]) >= 5:
        return {"fsdp": True, "fsdp_config": {"reshard_after_forward": True}}
    return {"fsdp": "full_shard auto_wrap"}


def train(trainer: Trainer, *, seq_len: int | None = None, **kwargs: Any) -> Any:
    """``trainer.train(**kwargs)`` under ``orch``: with :class:`OrchCallback` (``seq_len``:
    tokens per sample) unless the trainer has one, resumed from :func:`resume_checkpoint`.
    Returns what ``trainer.train`` returns."""
    if not any(isinstance(c, OrchCallback) for c in trainer.callback_handler.callbacks):
        trainer.add_callback(OrchCallback(seq_len))
    kwargs.setdefault("resume_from_checkpoint", resume_checkpoint())
    return trainer.train(**kwargs)


def resume_checkpoint() -> str | None:
    """The Trainer checkpoint this run resumes from: the one ``orch`` recorded last (its
    ``checkpoint-N`` in ``ctx.checkpoint_dir``), or ``None`` (a first run, or outside
    ``orch``)."""
    ctx = job.context()
    if not (job.under_orch() and ctx.resume and ctx.resume_step):
        return None
    path = os.path.join(ctx.checkpoint_dir, f"{CHECKPOINT_PREFIX}-{ctx.resume_step}")
    return path if os.path.isdir(path) else None


class OrchCallback(TrainerCallback):
    """Reports each optimizer step to ``orch``, checkpoints when asked and stops on
    preemption (see the module doc).

    Args:
        seq_len: tokens per sample (a causal LM's sequence length): each step then reports
            ``global batch x seq_len`` tokens. Without it, the Trainer's own count
            (``include_num_input_tokens_seen``) when it keeps one, else samples alone.
    """

    def __init__(self, seq_len: int | None = None) -> None:
        self.seq_len = seq_len
        self.loss: float | None = None
        self.tokens_seen = 0
        self.started = time.monotonic()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.started = time.monotonic()
        self.tokens_seen = int(getattr(state, "num_input_tokens_seen", 0) or 0)
        job.should_stop()  # from now on orch asks this script to stop instead of ending it

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any
    ) -> None:
        if logs and "loss" in logs:
            self.loss = float(logs["loss"])

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        samples = args.per_device_train_batch_size * args.gradient_accumulation_steps
        samples *= args.world_size
        job.report(
            samples=samples,
            tokens=self._tokens(state, samples),
            loss=self.loss,
            step=state.global_step,
        )
        ctx = job.context()
        late = ctx.duration_s is not None and time.monotonic() - self.started >= ctx.duration_s
        decision = decide(state.global_step, late, args.device)  # the same on every rank
        control.should_save = control.should_save or decision.save
        control.should_training_stop = control.should_training_stop or decision.stop

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if job.under_orch() and os.path.abspath(args.output_dir) == os.path.abspath(
            job.context().checkpoint_dir
        ):
            job.checkpointed(state.global_step)

    def _tokens(self, state: Any, samples: int) -> int | None:
        seen = int(getattr(state, "num_input_tokens_seen", 0) or 0)
        if seen > self.tokens_seen:
            tokens, self.tokens_seen = seen - self.tokens_seen, seen
            return tokens
        return samples * self.seq_len if self.seq_len else None
