"""Says what ``job.prepare`` made of a plain model, optimizer and loader: the wrapper's class,
the precision its forward runs in, the loader's batch size and workers (written to
``probe-<rank>.json`` in the job's checkpoint folder), after a few steps."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

from workers import job

seen: dict[str, object] = {}


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_autocast_enabled("cpu"):
            seen["autocast"] = str(torch.get_autocast_dtype("cpu"))
        for block in self.blocks:
            x = torch.tanh(block(x))
        return x.sum(dim=1, keepdim=True)


ctx = job.context()
data = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
wrapped, opt, loader = job.prepare(model, optimizer, DataLoader(data, batch_size=64))
for x, y in loader:
    loss = torch.nn.functional.mse_loss(wrapped(x), y)
    with torch.no_grad():
        seen["output"] = str(wrapped(x).dtype)
    loss.backward()
    opt.step()
    opt.zero_grad()
    seen["batch"] = len(x)
seen.update(
    wrapper=type(wrapped).__mro__[0].__name__,
    fsdp=isinstance(wrapped, torch.distributed.fsdp.FSDPModule),
    ddp=isinstance(wrapped, torch.nn.parallel.DistributedDataParallel),
    loader_batch=loader.data.batch_size,
    workers=loader.data.num_workers,
    sampler=type(loader.data.sampler).__name__,
)
Path(ctx.checkpoint_dir, f"probe-{ctx.rank}.json").write_text(json.dumps(seen))
