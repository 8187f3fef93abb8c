"""``gpt``: a small GPT-style decoder language model (pre-LN blocks, causal self-attention).

The synthetic corpus is arithmetic token sequences (random start and stride per sample, modulo
the vocabulary), which a decoder learns quickly: the loss visibly falls within a few hundred steps.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from workers.workloads.base import (
    Batch,
    Layout,
    Workload,
    WorkloadError,
    require_positive,
    take_args,
)
from workers.workloads.data import stack_samples
from workers.workloads.shapes import GPT_DEFAULTS, GPT_TP

DEFAULTS: dict[str, Any] = GPT_DEFAULTS  # in shapes: the control plane reads them without torch


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where each position sees only itself and earlier ones.

    Query, key and value are three projections (not one fused one) and the head count is read
    from the projected width, so a column-wise tensor-parallel split gives each rank whole
    heads (see ``LAYOUT_TP``).
    """

    def __init__(self, d_model: int, n_head: int) -> None:
        super().__init__()
        self.head_dim = d_model // n_head
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Attend over ``x`` of shape ``(N, T, C)``."""
        n, t, _ = x.shape
        q, k, v = (
            lin(x).view(n, t, -1, self.head_dim).transpose(1, 2) for lin in (self.q, self.k, self.v)
        )
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(n, t, -1))


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
    """Token and learned position embeddings, ``n_layer`` blocks, final LayerNorm, LM head.

    The blocks are a ``ModuleDict`` and every other part may be ``None``: a pipeline stage
    keeps only its own (see :data:`LAYOUT`), with the parameter names of the whole model.
    """

    def __init__(self, n_layer: int, d_model: int, n_head: int, seq_len: int, vocab: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.tok: nn.Embedding | None = nn.Embedding(vocab, d_model)
        self.pos: nn.Embedding | None = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleDict({str(i): Block(d_model, n_head) for i in range(n_layer)})
        self.ln_f: nn.LayerNorm | None = nn.LayerNorm(d_model)
        self.head: nn.Linear | None = nn.Linear(d_model, vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Next-token logits ``(N, T, vocab)`` for token ids ``(N, T)`` (a pipeline stage:
        from and to hidden states where it lacks the embeddings or the head)."""
        if self.tok is not None and self.pos is not None:
            positions = torch.arange(x.shape[1], device=x.device)
            x = self.tok(x) + self.pos(positions)
        for block in self.blocks.values():
            x = block(x)
        if self.ln_f is not None:
            x = self.ln_f(x)
        return self.head(x) if self.head is not None else x


def lm_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    """Mean next-token cross-entropy over every position of every sequence."""
    x, y = batch
    return token_loss(model(x), y)


def token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of ``logits (N, T, vocab)`` against token ids ``(N, T)``."""
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def _split(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = batch
    return x, y


# Megatron-LM's split of a pre-LN block (see workers.workloads.shapes).
LAYOUT_TP: dict[str, str] = GPT_TP


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
        blocks=list(model.blocks.values()),
        layout=Layout(
            blocks="blocks",
            first=("tok", "pos"),
            last=("ln_f", "head"),
            tensor_parallel=LAYOUT_TP,
            tp_divides=model.n_head,
            split=_split,
            loss=token_loss,
        ),
    )
