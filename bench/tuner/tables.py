"""Tabular benchmarks for the tuner: every config's measurement is known.

Two sources:

- Pollux (``bench/data/pollux``, real GPU-cluster measurements, OSDI'21 artifact). A config is
  (GPUs, per-GPU micro-batch). Its step time is the mean over the *compact* placements of that
  GPU count in ``placements.csv`` (fewest nodes: ``ceil(g / 4)`` nodes of 4 GPUs, what a
  packing scheduler picks). throughput = ``g * local_bsz / step_time``; latency (p50 = p95 =
  p99) = step time, since the table has one step time per config. A config with no row did
  not fit (out of memory). yolov3's micro-batch is capped at 8 as the README says.
- The CPU grid (``data/cpu_grid.json``), recorded on this machine by ``record_cpu_grid``.

Profiling cost model of one trial (the Pollux tables have no profiling times of their own):
``START_S + (WARMUP + MEASURED) * step_time``, with the 30 s a placement change costs in the
Pollux simulator as the start cost, 3 warm-up steps (the run default) and 20 measured steps.
An out-of-memory trial costs ``START_S`` (it fails at its first step). CPU-grid trials cost
their measured wall time.
"""

from __future__ import annotations

import csv
import json
import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from orchestrator.tuner.evaluators import TableEvaluator
from orchestrator.tuner.objective import Measurement
from orchestrator.tuner.space import Config, DeviceCaps, SearchSpace

DATA = Path(__file__).parent / "data"
POLLUX_APPS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
START_S = 30.0
WARMUP = 3
MEASURED = 20
GPUS_PER_NODE = 4
MAX_LOCAL_BSZ = {"yolov3": 8}


@dataclass(frozen=True)
class Table:
    """One tabular benchmark: its space and its ground truth."""

    name: str
    space: SearchSpace
    rows: dict[Config, Measurement]
    caps: DeviceCaps
    oom_cost_s: float

    def evaluator(self) -> TableEvaluator:
        """A fresh evaluator over the table."""
        return TableEvaluator(self.rows, self.caps, self.oom_cost_s)

    def cost(self, config: Config) -> float:
        """What a trial of ``config`` costs."""
        m = self.rows.get(config)
        return m.cost_s if m is not None else self.oom_cost_s

    @property
    def grid_cost_s(self) -> float:
        """Profiling seconds of the exhaustive grid."""
        return sum(self.cost(c) for c in self.space.configs())


def pollux_table(app: str, root: Path = DATA.parent.parent / "data" / "pollux" / "apps") -> Table:
    """The (GPUs, micro-batch) table of one Pollux application."""
    times: dict[tuple[int, int], list[float]] = defaultdict(list)
    with open(root / app / "placements.csv", newline="") as f:
        for row in csv.DictReader(f):
            placement = row["placement"]
            g = sum(int(d) for d in placement)
            if len(placement) != math.ceil(g / GPUS_PER_NODE):
                continue
            times[(g, int(row["local_bsz"]))].append(float(row["step_time"]))
    cap = MAX_LOCAL_BSZ.get(app)
    rows: dict[Config, Measurement] = {}
    for (g, m), ts in times.items():
        if cap is not None and m > cap:
            continue
        step = sum(ts) / len(ts)
        ms = step * 1000.0
        rows[Config(micro_batch=m, gpus=g)] = Measurement(
            "ok",
            p50_ms=ms,
            p95_ms=ms,
            p99_ms=ms,
            samples_per_s=g * m / step,
            cost_s=START_S + (WARMUP + MEASURED) * step,
        )
    ladder = tuple(sorted({c.micro_batch for c in rows}))
    gpus = tuple(sorted({c.gpus for c in rows}))
    space = SearchSpace(micro_batches=ladder, gpus=gpus, gpus_per_node=GPUS_PER_NODE)
    caps = DeviceCaps(
        name=f"pollux-{app}",
        kind="cuda",
        precisions=("fp32",),
        max_gpus=max(gpus),
        gpus_per_node=GPUS_PER_NODE,
    )
    return Table(f"pollux-{app}", space, rows, caps, START_S)


def cpu_grid_tables(path: Path = DATA / "cpu_grid.json") -> list[Table]:
    """One table per workload of the recorded CPU grid (none if it was not recorded)."""
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    out = []
    for wl in data["workloads"]:
        rows = {
            Config.from_dict(r["config"]): Measurement.from_dict(r["measurement"])
            for r in wl["rows"]
        }
        sp = wl["space"]
        space = SearchSpace(
            micro_batches=tuple(sp["micro_batches"]),
            grad_accums=tuple(sp["grad_accums"]),
            precisions=tuple(sp["precisions"]),
            activation_checkpointing=tuple(sp["activation_checkpointing"]),
        )
        caps = DeviceCaps(precisions=space.precisions)
        out.append(Table(f"cpu-{wl['name']}", space, rows, caps, 0.0))
    return out


def keep_batch(table: Table) -> Table:
    """The table as a job that keeps its global batch (what the tuner does by default since
    issue 22): only the configs whose global batch is the table's most common one among the
    configs that ran (ties: the largest), in a space that keeps it, so the optimum is the best
    split of that batch. Named ``<table>@<batch>``."""
    counts = Counter(
        c.global_batch for c in table.space.configs() if c in table.rows and table.rows[c].ok
    )
    batch = max(counts, key=lambda b: (counts[b], b))
    keep = [c for c in table.space.configs() if c.global_batch == batch]
    sp = table.space
    space = SearchSpace(
        micro_batches=tuple(sorted({c.micro_batch for c in keep})),
        grad_accums=tuple(sorted({c.grad_accum for c in keep})),
        gpus=tuple(sorted({c.gpus for c in keep})),
        shardings=sp.shardings,
        precisions=sp.precisions,
        activation_checkpointing=sp.activation_checkpointing,
        compile=sp.compile,
        gpus_per_node=sp.gpus_per_node,
        global_batches=(batch,),
    )
    return Table(f"{table.name}@{batch}", space, table.rows, table.caps, table.oom_cost_s)
