"""``job.prepare(model, optimizer, loader)``: the run's settings applied to a plain PyTorch loop.

In the spirit of Ray Train's ``prepare_model`` / ``prepare_data_loader`` (and Accelerate's
``prepare``): a team keeps its loop and adds one line::

    model, optimizer, loader = job.prepare(model, optimizer, loader, checkpoint=model.blocks)
    for x, y in loader:          # this rank's micro-batches, until the job's length or a stop
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

What it applies, in the order of the harness's plans (torchtitan's ``parallelize``: activation
checkpointing, then compile, then the data-parallel wrapper), each from :func:`job.context`:

- the process group (``ctx.init_method``) when there is more than one rank and none is started;
- activation checkpointing on the blocks named by ``checkpoint`` (modules, or a module class),
  when ``ctx.activation_checkpointing``; ``torch.compile`` (``Module.compile``, in place) when
  ``ctx.compile``;
- DDP, or FSDP2 (``fully_shard``, each named block a unit) when ``ctx.sharding`` is ``fsdp``: its
  parameters become DTensors, so the optimizer is rebuilt over them (same class, groups and
  options); the harness's own functions (:mod:`workers.parallel.data_parallel`);
- precision: the model's forward runs under ``torch.autocast`` and its floating outputs come
  back fp32 (as Accelerate does), so the loss is computed as before; fp16 on CUDA adds a
  ``GradScaler`` whose scale is applied to the gradients at the model's outputs (the same as
  scaling a loss made from them: a loss term that does not come from the outputs is not
  scaled, so use bf16 for such a loss);
- accumulation: the loader yields ``ctx.grad_accum`` micro-batches of ``ctx.micro_batch`` per
  optimizer step; ``optimizer.step()`` and ``zero_grad()`` act on the last of them (the gradient
  divided by ``grad_accum``, the mean over the global batch) and gradients are synchronised over
  the ranks only on that one (DDP's ``no_sync``, FSDP's ``set_requires_gradient_sync``);
- data: the loader is rebuilt over the same dataset and collate function with this run's loader
  knobs (``ctx.dataloader_kwargs``), a ``DistributedSampler`` seeded with ``ctx.seed`` (shuffled
  when the team's loader shuffled), whole micro-batches only, and timed (:func:`job.loader`);
  the global batch, ``micro_batch x grad_accum x world_size``, is the job's whatever the
  split, and a resumed run starts at the sample the stopped one would have read next;
- lifecycle: every ``ctx.checkpoint_every`` steps and on a stop request the model and
  optimizer are saved (:func:`save`), the worker is told (``job.checkpointed``), and on a stop
  the loader ends; a resumed run loads them (:func:`load`) before its first batch. Each step is
  measured by the step hook (:mod:`workers.launch`), so ``job.report`` is not needed.

Outside ``orch`` (``python train.py``) the loader keeps its own batch size and knobs and runs
one epoch, and nothing is saved: the same script runs anywhere.

Checkpoints are ``torch.distributed.checkpoint`` (DCP) folders, ``step-N`` in
``ctx.checkpoint_dir``, with ``latest`` naming the last whole one: every rank writes its own
shard (FSDP's DTensors stay sharded, DDP's replicas are written once), and DCP reshards on
load, so a run resumed on another number of ranks loads the same state. DCP runs on CPU with
Gloo as on CUDA; without a process group (one rank) it saves and loads in this process alone.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler

from workers import job
from workers.launch import install_step_hook

__all__ = ["PreparedLoader", "load", "prepare", "save"]

Blocks = type | Iterable[torch.nn.Module] | None


def prepare(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    loader: DataLoader[Any],
    *,
    checkpoint: Blocks = None,
    device: torch.device | None = None,
) -> tuple[torch.nn.Module, torch.optim.Optimizer, PreparedLoader]:
    """The run's settings applied to ``model``, ``optimizer`` and ``loader`` (see the module
    doc); returns the model to call (DDP's wrapper, or ``model`` sharded in place), the
    optimizer to step (``optimizer``, or a rebuilt one under FSDP) and the loader to iterate.

    Args:
        checkpoint: the blocks activation checkpointing recomputes (and FSDP's units): modules
            (``model.blocks``), or a module class whose instances in ``model`` are.
        device: where the model runs (default: ``cuda`` when present, else the CPU).
    """
    ctx = job.context()
    if not job.under_orch():  # `python train.py`: the loop as the team wrote it
        ctx = job.JobContext(micro_batch=loader.batch_size or 1, loader_settings={})
    if device is None:
        device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    _join_group(ctx, device)
    model.to(device)
    blocks = _blocks(model, checkpoint)
    if ctx.activation_checkpointing and blocks:  # every block, or the share the run names
        from workers.optimizations import apply_activation_checkpointing, checkpointed_blocks

        apply_activation_checkpointing(checkpointed_blocks(blocks, ctx.activation_checkpointing))
    if ctx.compile:
        model.compile()  # in place: the class and the state_dict's keys stay the model's
    wrapped, optimizer = _data_parallel(model, optimizer, blocks, ctx, device)
    step = _resume(wrapped, optimizer) if job.under_orch() and ctx.resume else 0
    scaler = _precision(wrapped, ctx.precision, device)
    _Accumulation(optimizer, ctx.grad_accum, scaler)
    data = PreparedLoader(loader, ctx, wrapped, optimizer, step, device)
    install_step_hook()  # a script not started by `python X` (the launcher) is measured too
    return wrapped, optimizer, data


def _join_group(ctx: job.JobContext, device: torch.device) -> None:
    if ctx.world_size > 1 and not dist.is_initialized():
        if ctx.init_method is None:
            raise RuntimeError("job.prepare: more than one rank but no ctx.init_method")
        from workers.distributed import init_group

        init_group(device, ctx.init_method, ctx.rank, ctx.world_size)


def _blocks(model: torch.nn.Module, checkpoint: Blocks) -> list[torch.nn.Module]:
    if checkpoint is None:
        return []
    if isinstance(checkpoint, type):
        return [m for m in model.modules() if isinstance(m, checkpoint) and m is not model]
    return list(checkpoint)


def _data_parallel(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    blocks: list[torch.nn.Module],
    ctx: job.JobContext,
    device: torch.device,
) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    if not dist.is_initialized():
        return model, optimizer
    from workers.parallel.data_parallel import apply_ddp, apply_fsdp

    if ctx.sharding != "fsdp":
        return apply_ddp(model, device), optimizer
    from torch.distributed.device_mesh import init_device_mesh

    names = {id(p): n for n, p in model.named_parameters()}
    mesh = init_device_mesh(device.type, (dist.get_world_size(),), mesh_dim_names=("dp",))
    apply_fsdp(model, blocks, mesh, zero=3, offload=False)
    return model, _rebuilt(optimizer, names, dict(model.named_parameters()))


def _rebuilt(
    optimizer: torch.optim.Optimizer, names: dict[int, str], params: dict[str, Any]
) -> torch.optim.Optimizer:
    """``optimizer`` over the sharded parameters that replaced its own (same class, groups
    and options; it has taken no step yet, so it has no state to carry)."""
    groups = [
        {
            **{k: v for k, v in g.items() if k != "params"},
            "params": [params[names[id(p)]] for p in g["params"]],
        }
        for g in optimizer.param_groups
    ]
    return type(optimizer)(groups, **optimizer.defaults)


def _precision(model: torch.nn.Module, precision: str, device: torch.device) -> Any:
    """Run ``model``'s forward under autocast (outputs back in fp32); the fp16 GradScaler."""
    if precision == "fp32":
        return None
    from workers.optimizations import autocast_context, make_grad_scaler

    autocast = autocast_context(precision, device)
    scaler = make_grad_scaler(precision, device)
    forward = model.forward

    @functools.wraps(forward)
    def in_precision(*args: Any, **kwargs: Any) -> Any:
        with autocast():
            out = forward(*args, **kwargs)
        return _fp32(out, scaler)

    model.forward = in_precision
    return scaler


def _fp32(out: Any, scaler: Any) -> Any:
    if isinstance(out, torch.Tensor):
        if not out.is_floating_point():
            return out
        out = out.float()
        if scaler is not None and out.requires_grad:
            out.register_hook(scaler.scale)  # the loss's scaling, applied at the outputs
        return out
    if isinstance(out, tuple | list):
        return type(out)(_fp32(o, scaler) for o in out)
    if isinstance(out, dict):
        return {k: _fp32(v, scaler) for k, v in out.items()}
    return out


class _Accumulation:
    """Makes the team's ``optimizer.step()`` / ``zero_grad()`` (called once per micro-batch)
    act once per ``accum`` of them (patched on the instance: it stays the optimizer's class,
    so a learning-rate scheduler takes it)."""

    def __init__(self, optimizer: torch.optim.Optimizer, accum: int, scaler: Any) -> None:
        self.optimizer, self.accum, self.scaler = optimizer, max(1, accum), scaler
        self.calls = 0
        self.inner = False
        self._step, self._zero = optimizer.step, optimizer.zero_grad
        optimizer.step = self.step  # type: ignore[method-assign]
        optimizer.zero_grad = self.zero_grad  # type: ignore[method-assign]

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        if self.inner:  # the GradScaler's own call of optimizer.step()
            return self._step(closure)
        self.calls += 1
        if self.calls % self.accum:
            return None
        if self.accum > 1:
            for group in self.optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        p.grad.div_(self.accum)
        if self.scaler is None:
            return self._step(closure)
        self.inner = True
        try:
            out = self.scaler.step(self.optimizer)
            self.scaler.update()
        finally:
            self.inner = False
        return out

    def zero_grad(self, set_to_none: bool = True) -> None:
        if self.calls % self.accum == 0:
            self._zero(set_to_none)


class PreparedLoader:
    """This rank's micro-batches for the job's length (see the module doc). Under ``orch`` one
    iteration spans the job's epochs, and later ones yield nothing (a team's own epoch loop
    around it runs once); outside, each iteration is one epoch, as the team's loader was."""

    def __init__(
        self,
        loader: DataLoader[Any],
        ctx: job.JobContext,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        step: int,
        device: torch.device,
    ) -> None:
        self.ctx, self.model, self.optimizer, self.step = ctx, model, optimizer, step
        self.device = device
        self.done = False
        self.orch = job.under_orch()
        shuffle = isinstance(loader.sampler, RandomSampler)
        world, rank = max(1, ctx.world_size), ctx.rank
        self.sampler = _ResumableSampler(
            loader.dataset,
            num_replicas=world,
            rank=rank,
            shuffle=shuffle,
            seed=ctx.seed,
            drop_last=True,
        )
        kwargs = ctx.dataloader_kwargs if self.orch else _own_kwargs(loader)
        self.data: DataLoader[Any] = DataLoader(
            loader.dataset,
            batch_size=ctx.micro_batch,
            sampler=self.sampler,
            collate_fn=loader.collate_fn,
            drop_last=True,
            **kwargs,
        )

    @property
    def batch_size(self) -> int:
        """Samples in each batch it yields (this rank's micro-batch)."""
        return self.ctx.micro_batch

    def __iter__(self) -> Iterator[Any]:
        ctx, accum = self.ctx, max(1, self.ctx.grad_accum)
        per_epoch = len(self.data)  # this rank's micro-batches in an epoch
        if per_epoch == 0:
            raise RuntimeError(
                f"job.prepare: the dataset has fewer samples than one micro-batch "
                f"({ctx.micro_batch}) on each of {ctx.world_size} ranks"
            )
        if self.done:  # a team's epoch loop around it: the job's length was run already
            return
        micro = self.step * accum  # micro-batches this rank has read in the job so far
        one_epoch = not self.orch
        started = time.monotonic()
        for epoch in itertools.count(micro // per_epoch):
            self.sampler.set_epoch(epoch)
            self.sampler.skip = (micro % per_epoch) * ctx.micro_batch
            for batch in job.loader(self.data):
                _grad_sync(self.model, micro % accum == accum - 1)
                yield _to(batch, self.device)
                micro += 1
                if micro % accum == 0:
                    self.step += 1
                    if self._boundary(started):
                        self.done = True
                        return
            if one_epoch:
                return

    def _boundary(self, started: float) -> bool:
        """After an optimizer step: whether the run ends here (checkpointed first when it
        stops or is due)."""
        ctx = self.ctx
        if not self.orch:
            return False
        over = ctx.steps is not None and self.step >= ctx.steps
        late = ctx.duration_s is not None and time.monotonic() - started >= ctx.duration_s
        stop = _agree(job.should_stop(), self.device)  # every rank ends at the same step
        due = ctx.checkpoint_every > 0 and self.step % ctx.checkpoint_every == 0
        if (stop or due) and not over:
            save(_state(self.model, self.optimizer), self.step)
        return stop or over or late


class _ResumableSampler(DistributedSampler[Any]):
    """A ``DistributedSampler`` that leaves out the first ``skip`` indices of its epoch."""

    skip = 0

    def __iter__(self) -> Iterator[int]:
        return itertools.islice(super().__iter__(), self.skip, None)

    def __len__(self) -> int:
        return self.num_samples - self.skip


def _own_kwargs(loader: DataLoader[Any]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"num_workers": loader.num_workers, "pin_memory": loader.pin_memory}
    if loader.num_workers > 0:
        kwargs["prefetch_factor"] = loader.prefetch_factor
        kwargs["persistent_workers"] = loader.persistent_workers
    return kwargs


def _grad_sync(model: torch.nn.Module, enabled: bool) -> None:
    """Synchronise gradients in the next backward only when ``enabled`` (what DDP's
    ``no_sync`` and FSDP's ``set_requires_gradient_sync`` switch)."""
    from torch.distributed.fsdp import FSDPModule
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(model, DistributedDataParallel):
        model.require_backward_grad_sync = enabled
    elif isinstance(model, FSDPModule):
        model.set_requires_gradient_sync(enabled)


def _to(batch: Any, device: torch.device) -> Any:
    if device.type == "cpu":
        return batch
    from workers.devices import to_device

    return to_device(batch, device)


def _agree(flag: bool, device: torch.device) -> bool:
    from workers.distributed import agree_any

    return agree_any([flag], device)[0]


def _state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The model's and optimizer's state as DCP keeps it (DDP's prefix off, FSDP's shards)."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    with job.hook_paused():  # a fresh optimizer's state is made by a step of lr 0: not counted
        model_state, optim_state = get_state_dict(model, optimizer)
    return {"model": model_state, "optimizer": optim_state}


def _resume(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Load the last checkpoint into ``model`` and ``optimizer``; its step (0: none)."""
    from torch.distributed.checkpoint.state_dict import set_state_dict

    state = _state(model, optimizer)
    step = load(state)
    if step is None:
        return 0
    set_state_dict(
        model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"]
    )
    return step


def save(state: dict[str, Any], step: int) -> None:
    """Save ``state`` (tensors, DTensors, nested dicts) as the checkpoint of ``step`` in
    ``ctx.checkpoint_dir`` and tell the worker (``job.checkpointed``) once every rank's part is
    written; the checkpoint before it is then removed. Every rank calls it."""
    import torch.distributed.checkpoint as dcp

    folder = Path(job.context().checkpoint_dir)
    target = folder / f"step-{step}"
    dcp.save(state, checkpoint_id=target)
    if dist.is_initialized():
        dist.barrier()  # every rank's shard is written
    if job.context().rank == 0:
        previous = _latest(folder)
        tmp = folder / "latest.tmp"
        tmp.write_text(str(step))
        os.replace(tmp, folder / "latest")  # a stop mid-save leaves the last whole one named
        job.checkpointed(step)
        if previous is not None and previous != step:
            import shutil

            shutil.rmtree(folder / f"step-{previous}", ignore_errors=True)


def load(state: dict[str, Any]) -> int | None:
    """Load the last checkpoint in ``ctx.checkpoint_dir`` into ``state`` (in place, as
    :func:`save` was given it; resharded to this run's ranks); its step, or ``None`` when
    there is none."""
    import torch.distributed.checkpoint as dcp

    folder = Path(job.context().checkpoint_dir)
    step = _latest(folder)
    if step is None:
        return None
    dcp.load(state, checkpoint_id=folder / f"step-{step}")
    return step


def _latest(folder: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int((folder / "latest").read_text())
    return None
