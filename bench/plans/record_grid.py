"""Record a grid of parallel plans on CPU ranks: every plan of 1 and 2 ranks, measured for real.

Each config is a point of the tuner's own space (``SearchSpace`` with ``plans``: data
parallelism at ZeRO 0-3, tensor parallelism 2, pipeline parallelism 2) at one global batch,
run by the worker harness on Gloo ranks (one process and one CPU thread per rank, as a
virtual GPU slot), 3 warm-up steps excluded and 10 measured, through ``harness_config`` as a
tuning trial runs it. The ranks of a GPU count are spawned once; each config meets in its own
process group. The grid is measured ``--repeats`` times in whole passes and each config keeps
the median of its runs, metric by metric (see ``bench/tuner/record_cpu_grid.py``).

2 ranks at most: the machine has 2 cores, and more ranks than cores would measure the
operating system's scheduler, not the plans.

    .venv/bin/python -m bench.plans.record_grid        # writes data/cpu_plans.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import torch.multiprocessing as mp

from orchestrator.tuner.space import Config, SearchSpace

OUT = Path(__file__).parent / "data" / "cpu_plans.json"
WORKLOAD = "gpt"
ARGS: dict[str, Any] = {"n_layer": 4, "d_model": 64, "n_head": 4, "seq_len": 32, "vocab": 256}
GLOBAL_BATCH = 32
PLANS = ((1, 1, 0), (1, 1, 1), (1, 1, 2), (1, 1, 3), (2, 1, 0), (1, 2, 0))
WARMUP, MEASURED = 3, 10


def space() -> SearchSpace:
    """The grid: the tuner's space of the job (one global batch, fp32, no compile)."""
    return SearchSpace(
        micro_batches=(2, 4, 8, 16, 32),
        grad_accums=(1, 2, 4, 8, 16),
        gpus=(1, 2),
        plans=PLANS,
        gpus_per_node=2,
        global_batches=(GLOBAL_BATCH,),
    )


def _rank(rank: int, world: int, configs: list[dict[str, Any]], out: Path, tag: str) -> None:
    import torch

    from orchestrator.runtime.harness_config import harness_config
    from workers.config import HarnessConfig
    from workers.harness import Harness

    torch.set_num_threads(1)
    rows = []
    for i, data in enumerate(configs):
        config = Config.from_dict(data)
        hc = HarnessConfig.from_dict(
            harness_config(
                WORKLOAD,
                ARGS,
                config,
                steps=WARMUP + MEASURED,
                warmup_steps=WARMUP,
                plan=config.plan(),
            )
        )
        t0 = time.perf_counter()
        init = f"file://{out}/{tag}-{i}.rendezvous" if world > 1 else None
        result = Harness(hc, rank=rank, world_size=world, init_method=init, device="cpu").run()
        rows.append({**result.to_dict(), "cost_s": time.perf_counter() - t0})
    if rank == 0:
        (out / f"{tag}.json").write_text(json.dumps(rows))


def main(argv: list[str] | None = None) -> int:
    """Measure the grid and write it."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--scratch", type=Path, default=Path("/tmp/plans-grid"))
    args = p.parse_args(argv)
    import torch

    args.scratch.mkdir(parents=True, exist_ok=True)
    grid = space()
    by_gpus = {g: [c for c in grid.configs() if c.gpus == g] for g in grid.gpus}
    runs: dict[Config, list[dict[str, Any]]] = {c: [] for c in grid.configs()}
    for rep in range(args.repeats):
        for g, configs in by_gpus.items():
            tag = f"r{rep}-g{g}-{time.time_ns()}"
            # a discarded first config: one-time process costs belong to no config
            todo = [configs[0].to_dict()] + [c.to_dict() for c in configs]
            mp.spawn(_rank, args=(g, todo, args.scratch, tag), nprocs=g)
            rows = json.loads((args.scratch / f"{tag}.json").read_text())[1:]
            for c, row in zip(configs, rows, strict=True):
                runs[c].append(row)
                print(
                    f"[{rep + 1}/{args.repeats}] {c.describe():50s} "
                    f"{row['samples_per_s']:8.1f}/s p95 {row['p95_ms']:7.1f} ms",
                    flush=True,
                )
    out = {
        "meta": {
            "date": datetime.date.today().isoformat(),
            "machine": f"{platform.processor() or platform.machine()}, 2-core CPU, no GPU",
            "torch": torch.__version__,
            "workload": WORKLOAD,
            "workload_args": ARGS,
            "threads_per_rank": 1,
            "warmup_steps": WARMUP,
            "measured_steps": MEASURED,
            "repeats": args.repeats,
            "statistic": "median of the repeats, metric by metric",
            "command": "python -m bench.plans.record_grid",
        },
        "workloads": [
            {
                "name": f"{WORKLOAD}-plans",
                "space": grid.to_dict(),
                "rows": [
                    {"config": c.to_dict(), "measurement": _median(rs)} for c, rs in runs.items()
                ],
            }
        ],
    }
    args.out.write_text(json.dumps(out, indent=1))
    return 0


def _median(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def med(name: str) -> float | None:
        values = [r[name] for r in rows if r.get(name) is not None]
        return statistics.median(values) if values else None

    rates = [r["samples_per_s"] for r in rows]
    return {
        "status": "ok",
        **{k: med(k) for k in ("p50_ms", "p95_ms", "p99_ms", "samples_per_s", "peak_mem_mb")},
        "cost_s": med("cost_s"),
        "samples_per_s_min_max": [min(rates), max(rates)],
    }


if __name__ == "__main__":
    raise SystemExit(main())
