"""A tiny Lightning run that writes what its Trainer holds (tests/workers/
test_integration_lightning.py); with ``--crash``, it fails at the third step."""

from __future__ import annotations

import json
import os
import sys

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from workers import job
from workers.integrations import lightning as orch


class Probe(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.batch_size = 4  # the script's own: orch's micro-batch replaces it
        self.net = torch.nn.Linear(8, 1)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        if "--crash" in sys.argv and self.trainer.global_step == 3:
            raise RuntimeError("shard 7 is corrupt: bad header")
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        x = torch.randn(512, 8, generator=torch.Generator().manual_seed(0))
        return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=self.batch_size)

    def on_train_start(self) -> None:
        t = self.trainer
        seen = {
            "precision": t.precision,
            "accumulate_grad_batches": t.accumulate_grad_batches,
            "max_steps": t.max_steps,
            "world_size": t.world_size,
            "num_nodes": t.num_nodes,
            "global_rank": t.global_rank,
            "strategy": type(t.strategy).__name__,
            "loader_batch": t.train_dataloader.batch_size,
            "root": t.default_root_dir,
        }
        ctx = job.context()
        with open(os.path.join(ctx.checkpoint_dir, f"probe-{ctx.rank}.json"), "w") as fh:
            json.dump(seen, fh)


def main() -> None:
    torch.manual_seed(0)
    kwargs = orch.trainer_kwargs(logger=False, enable_checkpointing=False, max_steps=100)
    trainer = pl.Trainer(**kwargs, enable_progress_bar=False, enable_model_summary=False)
    assert any(isinstance(c, orch.OrchCallback) for c in trainer.callbacks)
    trainer.fit(Probe(), ckpt_path=orch.resume_checkpoint())


if __name__ == "__main__":
    main()
