"""A team's own training script, run by `orch` in command mode (see README "Command mode").

It reads its settings from the job context, reports every optimizer step, checkpoints when
asked and stops cleanly when preempted. Its data is a seeded function of the step, and its
checkpoint holds the model and the optimizer, so a run stopped and resumed ends with the same
loss as one that never stopped. Run it on its own too: `python train.py` (defaults below).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

from workers import job

FEATURES = 16


def batch(seed: int, step: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step ``step``'s global batch: the same whatever run, rank split or resume draws it."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    x = torch.randn(size, FEATURES, generator=g)
    y = torch.sin(x.sum(dim=1, keepdim=True))
    return x, y


def agreed(flag: bool, world_size: int) -> bool:
    """Whether any rank says ``flag`` (one rank stopping alone would hang the others)."""
    if world_size == 1:
        return flag
    t = torch.tensor(float(flag))
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def save(folder: Path, model: torch.nn.Module, opt: torch.optim.Optimizer, step: int) -> None:
    """Write the checkpoint atomically (a preemption mid-write leaves the last one whole)."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / "model.pt.tmp"
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}, tmp)
    os.replace(tmp, folder / "model.pt")


def main() -> None:
    ctx = job.context()
    steps = ctx.steps or int(os.environ.get("TRAIN_STEPS", "200"))
    hidden = int(ctx.settings.get("hidden", 32))
    lr = float(ctx.settings.get("lr", 1e-2))
    torch.set_num_threads(int(ctx.settings.get("threads", 1)))  # speed only: the tuner's to pick
    pace_s = float(ctx.args.get("pace_s", 0.0))  # stands for a bigger model (the tests' use)
    if ctx.world_size > 1:
        dist.init_process_group("gloo", ctx.init_method, rank=ctx.rank, world_size=ctx.world_size)
    torch.manual_seed(ctx.seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1)
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    folder = Path(ctx.checkpoint_dir)
    step = 0
    if ctx.resume and (folder / "model.pt").exists():
        state = torch.load(folder / "model.pt")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
        print(f"resumed from step {step}", flush=True)
    dtype = torch.bfloat16 if ctx.precision == "bf16" else None
    loss = torch.zeros(())  # the last step's, over the whole global batch
    while step < steps:
        x, y = batch(ctx.seed, step, ctx.global_batch)
        per_rank = ctx.micro_batch * ctx.grad_accum
        mine = slice(ctx.rank * per_rank, (ctx.rank + 1) * per_rank)
        x, y = x[mine], y[mine]
        optimizer.zero_grad()
        loss = torch.zeros(())
        for k in range(ctx.grad_accum):
            part = slice(k * ctx.micro_batch, (k + 1) * ctx.micro_batch)
            with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
                micro = torch.nn.functional.mse_loss(model(x[part]), y[part]) / ctx.grad_accum
            micro.backward()
            loss += micro.detach().float()
        if ctx.world_size > 1:  # average gradients (and the loss) over the ranks
            for p in model.parameters():
                assert p.grad is not None
                dist.all_reduce(p.grad)
                p.grad /= ctx.world_size
            dist.all_reduce(loss)
            loss /= ctx.world_size
        optimizer.step()
        time.sleep(pace_s)
        step += 1
        job.report(samples=ctx.global_batch, loss=float(loss), step=step)
        stop = agreed(job.should_stop(), ctx.world_size)  # every rank stops at the same step
        if (stop or job.should_checkpoint()) and ctx.rank == 0:
            save(folder, model, optimizer, step)
            job.checkpointed(step)
        if stop:  # preempted, resized or cancelled: checkpointed, exit 0
            print(f"stopping at step {step}", flush=True)
            leave(ctx.world_size)
            return
    print(f"final loss {float(loss):.6f} at step {step}", flush=True)
    leave(ctx.world_size)


def leave(world_size: int) -> None:
    """Leave the process group together: a rank exiting while another still writes the
    checkpoint can abort that one's gloo threads ("terminate called without an active
    exception")."""
    if world_size > 1:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
