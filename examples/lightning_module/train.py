"""A LightningModule (a small character-level transformer LM) under `orch`, three lines changed
(a fourth, optional, gives the tokens per sample).

Everything is made here, nothing is downloaded: the text is generated, its characters are the
vocabulary, and the model (one causal transformer layer, d_model 64) starts from random
weights. Run it alone with `python train.py`, or submit it from this folder with
`orch submit --working-dir . job.yaml` (a tokens/s floor) or `job-latency.yaml` (a ceiling on
the step time). The lines marked `orch` are what the team changed.
"""

from __future__ import annotations

import argparse
import random

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from workers.integrations import lightning as orch  # orch

SEQ_LEN = 32
WORDS = "the cat dog model cluster team scheduler sees trains waits preempts resumes gpu batch"


def corpus(lines: int, seed: int = 0) -> str:
    """Sentences of random words of a small vocabulary (a model learns the spelling fast)."""
    rng = random.Random(seed)
    words = WORDS.split()
    return "\n".join(" ".join(rng.choice(words) for _ in range(6)) + " ." for _ in range(lines))


class CharLM(pl.LightningModule):
    """Embedding, one causal transformer layer, a linear head over the characters."""

    def __init__(self, data: TensorDataset, vocab: int, batch_size: int = 16) -> None:
        super().__init__()
        self.data, self.batch_size = data, batch_size  # batch_size: orch sets it
        self.embed = torch.nn.Embedding(vocab, 64)
        self.pos = torch.nn.Parameter(torch.zeros(SEQ_LEN, 64))
        self.layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
        self.head = torch.nn.Linear(64, vocab)
        self.register_buffer("mask", torch.nn.Transformer.generate_square_subsequent_mask(SEQ_LEN))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.layer(self.embed(x) + self.pos, src_mask=self.mask, is_causal=True)
        return self.head(h)

    def loss(self, batch: list[torch.Tensor]) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self(x).flatten(0, 1), y.flatten())

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.loss(batch)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=3e-3)

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        order = torch.Generator().manual_seed(0)
        return DataLoader(self.data, batch_size=self.batch_size, shuffle=True, generator=order)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--lines", type=int, default=3000)
    cli = parser.parse_args()

    text = corpus(cli.lines)
    chars = sorted(set(text))
    ids = torch.tensor([chars.index(c) for c in text])
    n = (len(ids) - 1) // SEQ_LEN
    x = ids[: n * SEQ_LEN].view(n, SEQ_LEN)
    y = ids[1 : n * SEQ_LEN + 1].view(n, SEQ_LEN)
    torch.manual_seed(0)
    model = CharLM(TensorDataset(x, y), vocab=len(chars))
    trainer = orch.trainer(  # orch: was trainer = pl.Trainer(
        seq_len=SEQ_LEN,  # orch: tokens per sample, for the tokens/s floor
        max_steps=cli.steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, ckpt_path=orch.resume_checkpoint())  # orch: was trainer.fit(model)
    with torch.no_grad():
        loss = model.loss([x[:64], y[:64]]).item()
    if trainer.is_global_zero:
        print(
            f"final loss {loss:.6f} at step {trainer.global_step} (batch {model.batch_size} x "
            f"{trainer.accumulate_grad_batches}, precision {trainer.precision})",
            flush=True,
        )


if __name__ == "__main__":
    main()
