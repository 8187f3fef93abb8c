"""Unseen tables: a second generator of ground truth, built apart from ``generated.py`` (issue 37).

``generated.py`` was written beside the strategy it grades; an outside reviewer's own generator
found what it had missed (feasible SLAs called infeasible on FSDP-only jobs, searches that never
measured 3 GPUs). This one draws its jobs from other functional forms, on a larger grid with
GPU counts that are not powers of two:

- the space: micro-batch 1..128, accumulation 1/2/4, 1..8 GPUs (4 per node), DDP or FSDP,
  fp32 or bf16, activation checkpointing off or on: 1,440 configs (1,344 on more than one GPU);
- compute per micro-batch is *flat below a saturation micro-batch* (a GPU not filled costs as
  much as a full one) and grows slightly faster than linearly above it:
  ``c1 * max(m, m_sat) * (1 + beta * log2 m)``;
- gradient sync is a ring all-reduce, ``lat * ceil(log2 g) + 2 (g-1)/g * bytes / bw``, with a
  slower link once the job spans nodes and a per-table penalty on GPU counts that are not
  powers of two; DDP *overlaps* it with the last micro-batch's backward pass, so only
  ``max(sync - overlap * backward, floor * sync)`` is exposed (not a sum of terms);
- FSDP all-gathers the parameters on every micro-batch (again under checkpointing's recompute),
  reduce-scatters once per step, and shards the optimizer step ``1/g``;
- memory per GPU: the model state (FSDP: ``1/g`` of it plus a gathered share), a fixed
  workspace, and activations per sample (bf16 and checkpointing shrink them).

Kinds, in turn (``seed % 5``): ``memory-wall`` (without checkpointing fp32 fits at most a few
samples, sometimes none), ``sharding-only`` (the model state is over one GPU's memory: DDP never
fits, FSDP from 4 to 8 GPUs), ``overhead-bound`` (per-micro-batch and per-step overheads of
hundreds of samples' compute: step time flat across micro-batches), ``comm-bound`` (gradient
bytes over a slow link, little overlap: more GPUs pay, accumulation amortises), ``noisy`` (a
plain job whose every step time is what a noisy profiler measured, ``exp(N(0, s))``,
``s`` in 1-3%).

SLAs per table (:func:`unseen_slas`): two throughput floors and two p95 ceilings within 1% of
a random config's own figure (knife edges), a floor 1.25x the best and a ceiling 0.8x the
fastest (impossible). A draw (``--unseen N --draw d``) is the tables of seeds ``1000 d``
onwards. Trial cost as in the other tables: 30 s to start plus 23 steps; an OOM costs 30 s.
"""

from __future__ import annotations

import math
import os
import random

from bench.tuner.tables import MEASURED, START_S, WARMUP, Table
from orchestrator.tuner.objective import Goal, Measurement
from orchestrator.tuner.space import Config, DeviceCaps, SearchSpace

__all__ = ["KINDS", "SPACE", "unseen_slas", "unseen_table", "unseen_tables"]

KINDS = ("memory-wall", "sharding-only", "overhead-bound", "comm-bound", "noisy")
GPUS_PER_NODE = 4
MEMORY_GB = 80.0
SPACE = SearchSpace(
    micro_batches=(1, 2, 4, 8, 16, 32, 64, 128),
    grad_accums=(1, 2, 4),
    gpus=tuple(range(1, 9)),
    shardings=("ddp", "fsdp"),
    precisions=("fp32", "bf16"),
    activation_checkpointing=(False, True),
    gpus_per_node=GPUS_PER_NODE,
)
PREFIX = "un-"


def _log_uniform(rng: random.Random, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


class _Truth:
    """The hidden step time and memory of one unseen table (drawn from ``rng``)."""

    def __init__(self, kind: str, rng: random.Random) -> None:
        self.kind = kind
        self.c1 = _log_uniform(rng, 1e-4, 4e-3)  # s per sample at full utilisation
        self.m_sat = rng.choice((1, 2, 4, 8, 16, 32))
        self.beta = rng.uniform(0.0, 0.05)
        heavy = kind == "overhead-bound"
        self.o_mb = self.c1 * (rng.uniform(64, 512) if heavy else rng.uniform(0.5, 6))
        self.o_step = self.c1 * (rng.uniform(100, 800) if heavy else rng.uniform(4, 40))
        self.bf16 = rng.uniform(0.35, 1.1)
        self.recompute = rng.uniform(1.15, 1.45)
        ref = self.compute(32)
        comm = kind == "comm-bound"
        self.wire = ref * (rng.uniform(2.0, 8.0) if comm else rng.uniform(0.05, 1.0))
        self.inter = rng.uniform(3.0, 8.0) if comm else rng.uniform(1.5, 4.0)
        self.lat = ref * rng.uniform(0.005, 0.05)
        self.odd = rng.uniform(1.05, 1.3)  # a ring over a count not a power of two
        self.overlap = rng.uniform(0.0, 0.3) if comm else rng.uniform(0.3, 0.9)
        self.exposed = rng.uniform(0.05, 0.2)
        self.gather_exposed = rng.uniform(0.2, 0.6)
        self.ratio = rng.uniform(1.02, 1.15)
        self.noise = rng.uniform(0.01, 0.03) if kind == "noisy" else 0.0
        self.workspace = rng.uniform(1.0, 4.0)
        self.gathered = rng.uniform(0.02, 0.06)
        self.act_bf16 = rng.uniform(0.5, 0.65)
        self.act_ckpt = rng.uniform(0.08, 0.3)
        self._memory(kind, rng)

    def _memory(self, kind: str, rng: random.Random) -> None:
        room = MEMORY_GB - self.workspace
        if kind == "sharding-only":
            # the model state alone is over one GPU; FSDP fits from 4 to 8 GPUs
            while True:
                self.state = MEMORY_GB * rng.uniform(2.0, 6.5)
                left8 = room - self.state * (1 / 8 + self.gathered)
                if left8 <= 0:
                    continue
                self.act = left8 / rng.uniform(4, 96)
                smallest = next((g for g in SPACE.gpus if g > 1 and self._fits(g, 1)), 0)
                if 4 <= smallest <= 8:
                    return
        self.state = MEMORY_GB * rng.uniform(0.03, 0.3)
        left = room - self.state
        fits = rng.uniform(0.5, 3.0) if kind == "memory-wall" else rng.uniform(12, 256)
        self.act = left / fits  # GB per sample, fp32, no checkpointing

    def _fits(self, gpus: int, micro_batch: int, *, fsdp: bool = True, act: float = 1.0) -> bool:
        state = self.state * (1 / gpus + self.gathered) if fsdp and gpus > 1 else self.state
        return state + self.workspace + micro_batch * self.act * act <= MEMORY_GB

    def fits(self, c: Config) -> bool:
        """Whether ``c`` runs in one GPU's memory."""
        act = self.act_bf16 if c.precision == "bf16" else 1.0
        act *= self.act_ckpt if c.activation_checkpointing else 1.0
        return self._fits(c.gpus, c.micro_batch, fsdp=c.sharding == "fsdp", act=act)

    def compute(self, m: int) -> float:
        """Forward and backward seconds of one micro-batch, fp32, no checkpointing."""
        return self.c1 * max(m, self.m_sat) * (1 + self.beta * math.log2(max(m, 1)))

    def ring(self, g: int, volume: float) -> float:
        """Seconds of a ring collective moving ``volume`` (in units of the gradient) on ``g``."""
        if g <= 1:
            return 0.0
        bw = 1.0 if g <= GPUS_PER_NODE else 1.0 / self.inter
        t = self.lat * math.ceil(math.log2(g)) + volume * (g - 1) / g * self.wire / bw
        return t * (self.odd if g & (g - 1) else 1.0)

    def step_s(self, c: Config) -> float:
        """Mean seconds of one optimizer step of ``c``."""
        per_step, micro, exposed = self.parts(c)
        return per_step + micro + exposed

    def parts(self, c: Config) -> tuple[float, float, float]:
        """One step of ``c`` in parts: once per step (the optimizer), the micro-batches'
        forward and backward (FSDP's all-gathers in them), and the gradient sync's exposed
        time."""
        g, a = c.gpus, c.grad_accum
        comp = self.compute(c.micro_batch)
        comp *= self.bf16 if c.precision == "bf16" else 1.0
        comp *= self.recompute if c.activation_checkpointing else 1.0
        backward = comp * 2 / 3
        if c.sharding == "fsdp" and g > 1:
            gathers = 3 if c.activation_checkpointing else 2  # forward, backward (, recompute)
            gather = self.ring(g, gathers / 2) * self.gather_exposed
            sync = self.ring(g, 0.5)  # reduce-scatter once per step
            opt = self.o_step * (1 / g + self.gathered)
        else:
            gather = 0.0
            sync = self.ring(g, 2.0)  # all-reduce
            opt = self.o_step
        exposed = max(sync - self.overlap * backward, self.exposed * sync)
        return opt, a * (self.o_mb + comp + gather), exposed


PARTS = os.environ.get("UNSEEN_PARTS", "1") != "0"
"""Whether a table's measurements carry the step in parts, as the harness reports them
(``workers.step_parts``); ``UNSEEN_PARTS=0`` leaves them out (the strategy without them)."""


def _parts_ms(c: Config, per_step: float, micro: float, exposed: float) -> dict[str, float | None]:
    """What the harness would report of a step of ``c`` in parts: the sync is told apart from
    the backward only with accumulation (else it is in ``fwd_bwd``; ``comm`` unknown)."""
    told = c.grad_accum > 1 or c.gpus == 1
    return {
        "data_wait_ms": 0.0,
        "fwd_bwd_ms": (micro + (0.0 if told else exposed)) * 1000.0,
        "comm_ms": exposed * 1000.0 if told else None,
        "optimizer_ms": per_step * 1000.0,
        "step_other_ms": 0.0,
    }


def unseen_table(seed: int) -> Table:
    """The table of ``seed`` (its kind is ``KINDS[seed % 5]``)."""
    kind = KINDS[seed % len(KINDS)]
    rng = random.Random(f"unseen-{seed}")
    truth = _Truth(kind, rng)
    rows: dict[Config, Measurement] = {}
    for c in SPACE.configs():
        jitter = math.exp(rng.gauss(0.0, truth.noise)) if truth.noise > 0 else 1.0
        if not truth.fits(c):
            continue
        per_step, micro, exposed = (x * jitter for x in truth.parts(c))
        step = per_step + micro + exposed
        ms = step * 1000.0
        nodes = math.ceil(c.gpus / GPUS_PER_NODE)
        tail = truth.ratio * (1.0 + 0.03 * (nodes - 1))  # a tail that widens across nodes
        rows[c] = Measurement(
            "ok",
            p50_ms=ms,
            p95_ms=ms * tail,
            p99_ms=ms * tail * 1.05,
            samples_per_s=c.global_batch / step,
            cost_s=START_S + (WARMUP + MEASURED) * step,
            **(_parts_ms(c, per_step, micro, exposed) if PARTS else {}),
        )
    caps = DeviceCaps(
        name=f"unseen-{seed}",
        kind="cuda",
        precisions=SPACE.precisions,
        shardings=SPACE.shardings,
        max_gpus=max(SPACE.gpus),
        gpus_per_node=GPUS_PER_NODE,
    )
    return Table(f"{PREFIX}{kind}-{seed}", SPACE, rows, caps, START_S)


def unseen_tables(n: int, draw: int = 0) -> list[Table]:
    """``n`` tables of draw ``draw``: seeds ``1000 * draw`` onwards, every kind in turn (a table
    where nothing fits is skipped for the next seed)."""
    out: list[Table] = []
    seed = 1000 * draw
    while len(out) < n:
        table = unseen_table(seed)
        if table.rows:
            out.append(table)
        seed += 1
    return out


def unseen_slas(table: Table) -> list[tuple[str, Goal]]:
    """Knife-edge and impossible SLAs of an unseen table (see the module doc), seeded by the
    table's name so that every strategy and run sees the same ones."""
    rng = random.Random(f"slas-{table.name}")
    ok = [m for m in table.rows.values() if m.ok]
    rates = sorted(m.samples_per_s or 0.0 for m in ok)
    lats = sorted(m.p95_ms or 0.0 for m in ok)
    out: list[tuple[str, Goal]] = []
    for i in range(2):
        rate = rates[min(int(rng.uniform(0.4, 1.0) * len(rates)), len(rates) - 1)]
        floor = rate * (1 - rng.uniform(0.0, 0.01))
        out.append((f"floor knife-edge {i + 1}", Goal("throughput", floor=floor)))
    for i in range(2):
        lat = lats[min(int(rng.uniform(0.0, 0.5) * len(lats)), len(lats) - 1)]
        ceiling = lat * (1 + rng.uniform(0.0, 0.01))
        out.append((f"p95 knife-edge {i + 1}", Goal("latency", ceiling_ms=ceiling)))
    out.append(("floor 1.25x max (infeasible)", Goal("throughput", floor=1.25 * rates[-1])))
    out.append(("p95 <= 0.8x min (infeasible)", Goal("latency", ceiling_ms=0.8 * lats[0])))
    return out
