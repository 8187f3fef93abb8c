"""Generated tables: ground truth the tuner's strategies were not built on (issue 22 part 6).

Each table is drawn from a seed: a GPU training job on a 2-node cluster of 4 GPUs each, with
micro-batch 1..128, accumulation 1 or 2, 1/2/4/8 GPUs, DDP or FSDP, fp32 or bf16, activation
checkpointing off or on (448 configs). The step time is *not* the tuner's performance model
(that would grade the model on its own form):

    t = c_step + a * (c0 + compute(m) + fsdp_gather(g)) + sync(g)
    compute(m) = c1 * m * (1 + knee * max(0, m / m_knee - 1))    (falls out of cache past m_knee)

times bf16's speed-up (0.45-1.15: some devices are slower in bf16) on compute, checkpointing's
recompute (1.2-1.4x) on compute, a per-node sync with its own irregularity per GPU count, and
FSDP's all-gathers paid on every micro-batch. Memory per GPU is the model state (16 bytes a
parameter; FSDP holds ``1/g`` of it plus a gathered layer) plus activations per sample (bf16
0.55-0.7x, checkpointing 0.15-0.35x); a config over the device's memory is absent (out of
memory). Four kinds, by ``seed % 4``:

- ``plain``: DDP fits micro-batches 16-256;
- ``memory-wall``: without checkpointing only micro-batches of 0.5-4 fit (sometimes none), so
  the optimum needs checkpointing;
- ``fsdp-only``: the model state alone is over the device's memory: DDP never fits, FSDP fits
  from 2, 4 or 8 GPUs;
- ``overhead``: a per-micro-batch overhead 64-512 samples' compute, so step time is flat
  across micro-batches (latency ceilings sit on a plateau).

``noise`` multiplies each config's step time by ``exp(N(0, noise))``: the table is then what a
noisy profiler would have measured, and no longer monotone in the micro-batch.

SLAs per table (:func:`generated_slas`): two throughput floors and two latency ceilings placed
within 2% of a config's own value (a knife edge: that config just meets it), from a config at a
random quantile; a floor 1.25x the best and a ceiling 0.8x the fastest, which no config meets.
Trial cost as in the Pollux tables: 30 s to start plus 23 steps; an OOM costs the 30 s.
"""

from __future__ import annotations

import math
import random

from bench.tuner.tables import MEASURED, START_S, WARMUP, Table
from orchestrator.tuner.objective import Goal, Measurement
from orchestrator.tuner.space import Config, DeviceCaps, SearchSpace

__all__ = ["KINDS", "generated_slas", "generated_table", "generated_tables"]

KINDS = ("plain", "memory-wall", "fsdp-only", "overhead")
GPUS_PER_NODE = 4
MEMORY_GB = 80.0
SPACE = SearchSpace(
    micro_batches=(1, 2, 4, 8, 16, 32, 64, 128),
    grad_accums=(1, 2),
    gpus=(1, 2, 4, 8),
    shardings=("ddp", "fsdp"),
    precisions=("fp32", "bf16"),
    activation_checkpointing=(False, True),
    gpus_per_node=GPUS_PER_NODE,
)


class _Job:
    """The hidden truth of one generated table (drawn from ``rng``)."""

    def __init__(self, kind: str, rng: random.Random) -> None:
        self.c1 = math.exp(rng.uniform(math.log(2e-4), math.log(5e-3)))  # s per sample
        heavy = kind == "overhead"
        self.c0 = self.c1 * (rng.uniform(64, 512) if heavy else rng.uniform(1, 16))
        self.c_step = self.c0 * rng.uniform(0.5, 3.0)
        self.m_knee = rng.choice((16, 32, 64, 1 << 20))
        self.knee = rng.uniform(0.05, 0.3)
        self.bf16 = rng.uniform(0.45, 1.15)
        self.recompute = rng.uniform(1.2, 1.4)
        base = self.c0 + self.c1 * 16
        self.sync_node = [base * rng.uniform(0.1, 1.0)]
        self.sync_node.append(self.sync_node[0] * rng.uniform(2.0, 4.0))
        self.sync_jitter = {g: rng.uniform(0.9, 1.1) for g in SPACE.gpus}
        self.gather = rng.uniform(0.3, 0.8)
        self.ratio = rng.uniform(1.02, 1.2)  # p95 over the mean step
        # memory (GB per GPU)
        if kind == "fsdp-only":
            self.state = MEMORY_GB * rng.uniform(1.05, 2.6)
        else:
            self.state = MEMORY_GB * rng.uniform(0.03, 0.3)
        room = MEMORY_GB - self.state * (0.1 + 1 / 8 if kind == "fsdp-only" else 1.0)
        fits = rng.uniform(0.5, 4.0) if kind == "memory-wall" else rng.uniform(16, 256)
        self.act = room / fits  # GB per sample, fp32, no checkpointing
        self.act_bf16 = rng.uniform(0.55, 0.7)
        self.act_ckpt = rng.uniform(0.15, 0.35)

    def fits(self, c: Config) -> bool:
        state = self.state if c.sharding == "ddp" else self.state * (1 / c.gpus + 0.1)
        act = self.act * (self.act_bf16 if c.precision == "bf16" else 1.0)
        act *= self.act_ckpt if c.activation_checkpointing else 1.0
        return state + c.micro_batch * act <= MEMORY_GB

    def step_s(self, c: Config) -> float:
        m, g = c.micro_batch, c.gpus
        compute = self.c1 * m * (1 + self.knee * max(0.0, m / self.m_knee - 1))
        compute *= self.bf16 if c.precision == "bf16" else 1.0
        compute *= self.recompute if c.activation_checkpointing else 1.0
        sync = 0.0
        if g > 1:
            nodes = math.ceil(g / GPUS_PER_NODE)
            sync = self.sync_node[nodes - 1] * (1 + 0.1 * (g - 2)) * self.sync_jitter[g]
        gather = self.gather * sync if c.sharding == "fsdp" else 0.0
        return self.c_step + c.grad_accum * (self.c0 + compute + gather) + sync


def generated_table(seed: int, noise: float = 0.0) -> Table:
    """The table of ``seed`` (its kind is ``KINDS[seed % 4]``), step times times
    ``exp(N(0, noise))`` per config."""
    kind = KINDS[seed % len(KINDS)]
    rng = random.Random(seed)
    job = _Job(kind, rng)
    rows: dict[Config, Measurement] = {}
    for c in SPACE.configs():
        jitter = math.exp(rng.gauss(0.0, noise)) if noise > 0 else 1.0
        if not job.fits(c):
            continue
        step = job.step_s(c) * jitter
        ms = step * 1000.0
        rows[c] = Measurement(
            "ok",
            p50_ms=ms,
            p95_ms=ms * job.ratio,
            p99_ms=ms * job.ratio * 1.05,
            samples_per_s=c.global_batch / step,
            cost_s=START_S + (WARMUP + MEASURED) * step,
        )
    caps = DeviceCaps(
        name=f"generated-{seed}",
        kind="cuda",
        precisions=SPACE.precisions,
        shardings=SPACE.shardings,
        max_gpus=max(SPACE.gpus),
        gpus_per_node=GPUS_PER_NODE,
    )
    name = f"gen-{kind}-{seed}" + (f"~{noise:g}" if noise > 0 else "")
    return Table(name, SPACE, rows, caps, START_S)


def generated_tables(n: int, noise: float = 0.0, first_seed: int = 0) -> list[Table]:
    """``n`` tables, seeds ``first_seed`` onwards (every kind in turn); a table where nothing
    fits at all is skipped for the next seed."""
    out: list[Table] = []
    seed = first_seed
    while len(out) < n:
        table = generated_table(seed, noise)
        if table.rows:
            out.append(table)
        seed += 1
    return out


def generated_slas(table: Table) -> list[tuple[str, Goal]]:
    """Knife-edge and impossible SLAs of a generated table (see the module doc); seeded by the
    table's name, so every strategy and run sees the same ones."""
    rng = random.Random(table.name)
    ok = sorted((m for m in table.rows.values() if m.ok), key=lambda m: m.samples_per_s or 0.0)
    rates = [m.samples_per_s or 0.0 for m in ok]
    lats = sorted(m.p95_ms or 0.0 for m in ok)
    out: list[tuple[str, Goal]] = []
    for i in range(2):
        rate = rates[min(int(rng.uniform(0.5, 1.0) * len(rates)), len(rates) - 1)]
        floor = rate * (1 - rng.uniform(0.0, 0.02))
        out.append((f"floor knife-edge {i + 1}", Goal("throughput", floor=floor)))
    for i in range(2):
        lat = lats[min(int(rng.uniform(0.0, 0.5) * len(lats)), len(lats) - 1)]
        ceiling = lat * (1 + rng.uniform(0.0, 0.02))
        out.append((f"p95 knife-edge {i + 1}", Goal("latency", ceiling_ms=ceiling)))
    out.append(("floor 1.25x max (infeasible)", Goal("throughput", floor=1.25 * rates[-1])))
    out.append(("p95 <= 0.8x min (infeasible)", Goal("latency", ceiling_ms=0.8 * lats[0])))
    return out
