"""``gpt``: a small GPT-style decoder language model (pre-LN blocks, causal self-attention).

The synthetic corpus is arithmetic token sequences (random start and stride per sample, modulo
the vocabulary), which a decoder learns quickly: the loss visibly falls within a few hundred steps.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from workers.workloads.base import Batch, Workload, WorkloadError, require_positive, take_args
from workers.workloads.data import stack_samples

DEFAULTS: dict[str, Any] = {"n_layer": 2, "d_model": 64, "n_head": 4, "seq_len": 64, "vocab": 256}


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where each position sees only itself and earlier ones."""

    def __init__(self, d_model: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Attend over ``x`` of shape ``(N, T, C)``."""
        n, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(n, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(n, t, c))


class Block(nn.Module):
    """Pre-LayerNorm transformer block: attention and a 4x MLP, each with a residual."""

    def __init__(self, d_model: int, n_head: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_head)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the block to ``x`` of shape ``(N, T, C)``."""
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Token and learned position embeddings, ``n_layer`` blocks, final LayerNorm, LM head."""

    def __init__(self, n_layer: int, d_model: int, n_head: int, seq_len: int, vocab: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Next-token logits ``(N, T, vocab)`` for token ids ``(N, T)``."""
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def lm_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    """Mean next-token cross-entropy over every position of every sequence."""
    x, y = batch
    logits = model(x)
    return F.cross_entropy(logits.flatten(0, 1), y.flatten())


def build_parts(args: dict[str, Any], seed: int, name: str) -> tuple[GPT, Any, int]:
    """The model, ``make_batch`` and sequence length, shared by ``gpt`` and ``infer``."""
    a = take_args(name, args, DEFAULTS)
    require_positive(name, a, list(DEFAULTS))
    if a["d_model"] % a["n_head"]:
        raise WorkloadError(
            f"workload {name!r}: d_model {a['d_model']} must be divisible by n_head {a['n_head']}"
        )
    seq_len, vocab = a["seq_len"], a["vocab"]

    def sample(gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        start = torch.randint(vocab, (), generator=gen)
        stride = torch.randint(1, 8, (), generator=gen)
        tokens = (start + stride * torch.arange(seq_len + 1)) % vocab
        return tokens[:-1], tokens[1:]

    def make_batch(first: int, count: int) -> Batch:
        return stack_samples(seed, first, count, sample)

    model = GPT(a["n_layer"], a["d_model"], a["n_head"], seq_len, vocab)
    return model, make_batch, seq_len


def build(args: dict[str, Any], seed: int) -> Workload:
    """Build the ``gpt`` workload (arguments: n_layer, d_model, n_head, seq_len, vocab)."""
    model, make_batch, seq_len = build_parts(args, seed, "gpt")
    return Workload(
        model=model,
        loss=lm_loss,
        make_batch=make_batch,
        tokens_per_sample=seq_len,
        blocks=list(model.blocks),
    )
