"""A plain PyTorch loop that `orch` tunes: one line added (`job.prepare`), two with the import
(bench/command/lines_changed.py counts them).

`job.prepare` applies the run's micro-batch, accumulation, ranks (DDP, or FSDP), precision,
activation checkpointing, compile and loader settings, checkpoints on preemption and resumes,
and measures each step. Run it alone with `python train.py`; submit it with
`orch submit --working-dir . job.yaml`.
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

from workers import job  # orch


class Net(torch.nn.Module):
    def __init__(self, features: int = 16, hidden: int = 32, depth: int = 2) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(features, hidden)
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(hidden, hidden), torch.nn.Tanh())
            for _ in range(depth)
        )
        self.out = torch.nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for block in self.blocks:
            h = h + block(h)
        return self.out(h)


def main() -> None:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2048, 16, generator=g)
    y = torch.sin(x.sum(dim=1, keepdim=True))
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
    model = Net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer, loader = job.prepare(model, optimizer, loader, checkpoint=model.blocks)

    for _epoch in range(3):
        for xb, yb in loader:
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()

    with torch.no_grad():
        loss = torch.nn.functional.mse_loss(model(x), y).item()
    print(f"final loss {loss:.6f} ({type(model).__name__}, batch {loader.batch_size})", flush=True)


if __name__ == "__main__":
    main()
