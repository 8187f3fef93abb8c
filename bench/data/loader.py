"""The decoding workload's samples/s and data-wait share against the loader's settings, and
the settings the tuner's loader stage picks against the defaults.

    .venv/bin/python bench/data/loader.py           # about 10 minutes on a 2-core VM
    .venv/bin/python bench/data/loader.py --smoke   # seconds: checks that it runs

Workload: ``images`` (the small conv net of ``cnn``, 2 blocks of 16 channels) on 512 images of
64x64 written once from the seed, each decoded on every read: ``xz`` (about 2 ms an image here,
the order of a JPEG decode of a larger photograph) and ``png`` (zlib, about ten times cheaper).
Micro-batch 32, fp32, compute on one torch thread (one virtual GPU slot); a run is 3 warm-up
steps and 30 measured ones, so it crosses two epoch boundaries (16 steps an epoch), where the
loader's pipeline refills and non-persistent workers start again, and where a cache starts
paying.

For each codec: first the tuner as ``orch tune`` runs it (``tune_spec``'s two stages with the
in-process harness evaluator and an in-memory study: stage 1 on the job's own loader, stage 2
over the loader candidates if the chosen config waited >= 10% of its step), then every setting
of :data:`SETTINGS` plus the tuned one, ``--repeats`` times, the order rotated each repeat.
Reported per setting: samples/s at the wall clock (the timed steps' rate x (1 - data-wait
share), what the job's work goes at, and what the tuner's loader stage judges), the harness's
data-wait share (wait / (wait + step)), the
95th percentile of the steps' waits, medians (min-max) over the repeats, and the ratio of
samples/s to the defaults' in the same repeat (median, min-max).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
RESULTS = Path(__file__).parent / "results"

SETTINGS: list[tuple[str, dict[str, Any]]] = [
    ("defaults (no workers)", {}),
    ("1 worker", {"num_workers": 1}),
    ("2 workers", {"num_workers": 2}),
    (
        "2 workers, persistent, prefetch 4",
        {"num_workers": 2, "persistent_workers": True, "prefetch_factor": 4},
    ),
    ("no workers, cache 64 MB", {"cache_mb": 64}),
    (
        "2 workers, persistent, cache 64 MB",
        {"num_workers": 2, "persistent_workers": True, "cache_mb": 64},
    ),
]


def run_once(
    codec: str, loader: dict[str, Any], warmup: int, steps: int, images: int
) -> dict[str, Any]:
    """One harness run of the images workload with ``loader``; its measured figures."""
    from workers.harness import Harness, HarnessConfig

    cfg = HarnessConfig(
        workload="images",
        workload_args={"images": images, "codec": codec},
        micro_batch=32,
        steps=warmup + steps,
        warmup_steps=warmup,
        loader=loader,
    )
    r = Harness(cfg, num_threads=1).run()
    assert r.samples_per_s is not None and r.data_wait_share is not None
    return {
        # at the wall clock: the timed steps' rate less the time spent waiting for data
        "samples_per_s": r.samples_per_s * (1.0 - r.data_wait_share),
        "step_samples_per_s": r.samples_per_s,
        "data_wait_share": r.data_wait_share,
        "data_wait_p95_ms": r.data_wait_p95_ms,
        "compute_ms": r.compute_ms,
    }


def tune(codec: str, images: int, measured: int) -> dict[str, Any]:
    """The tuner's two stages, as ``tune_spec`` runs them, without Redis."""
    from orchestrator.spec import parse_spec
    from orchestrator.tuner.evaluators import HarnessEvaluator
    from orchestrator.tuner.job_space import space_for
    from orchestrator.tuner.loader_stage import data_wait_material, tune_loader
    from orchestrator.tuner.objective import Goal
    from orchestrator.tuner.space import DeviceCaps
    from orchestrator.tuner.strategies import STRATEGIES
    from orchestrator.tuner.tuner import Tuner
    from workers.loader_settings import LoaderSettings

    spec = parse_spec(
        {
            "name": "images",
            "team": "bench",
            "class": "bulk",
            "workload": {"name": "images", "args": {"images": images, "codec": codec}},
            "sla": {"throughput": {"min_samples_per_s": 1}},
            "run": {"steps": 100, "micro_batch": 32},
            "tuning": {
                "enabled": True,
                "bounds": {"grad_accum": {"min": 1, "max": 1}, "precision": ["fp32"]},
            },
        }
    )
    caps = DeviceCaps(precisions=("fp32",), max_micro_batch=32)
    evaluator = HarnessEvaluator(
        "images", spec.workload.args, caps=caps, warmup_steps=3, measured_steps=measured
    )
    goal = Goal.from_spec(spec)
    space = space_for(spec, caps, forward_only=evaluator.forward_only())
    t0 = time.perf_counter()
    first = Tuner(space, goal, evaluator, STRATEGIES.create("sla", seed=0)).run()
    result = first
    staged = data_wait_material(first, evaluator.reads_dataset())
    if staged:
        result = tune_loader(first, space, goal, evaluator)
    chosen = result.chosen
    assert chosen is not None
    wait = first.chosen.measurement.data_wait_share if first.chosen else None
    return {
        "stage1_data_wait_share": wait,
        "loader_stage": staged,
        "trials": result.trials,
        "tuning_s": round(time.perf_counter() - t0, 1),
        "chosen": chosen.config.describe(),
        "loader": LoaderSettings.from_token(chosen.config.loader).to_dict(),
    }


def span(values: list[float], fmt: str = ".3g") -> str:
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks that it runs")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    warmup, steps, images, measured = (1, 4, 64, 3) if args.smoke else (3, 30, 512, 10)
    repeats = 1 if args.smoke else args.repeats
    os.environ.setdefault("ORCH_DATASETS", tempfile.mkdtemp(prefix="bench-data-"))
    out: dict[str, Any] = {"codecs": {}}
    for codec in ("xz", "png"):
        run_once(codec, {}, 0, 1, images)  # writes the dataset (once), outside the figures
        tuned = tune(codec, images, measured)
        settings = [*SETTINGS, ("tuned: " + _short(tuned["loader"]), tuned["loader"])]
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in settings}
        for rep in range(repeats):
            order = settings[rep % len(settings) :] + settings[: rep % len(settings)]
            for name, loader in order:
                runs[name].append(run_once(codec, loader, warmup, steps, images))
        rows = []
        for name, loader in settings:
            rs = runs[name]
            ratios = [
                r["samples_per_s"] / d["samples_per_s"]
                for r, d in zip(rs, runs[settings[0][0]], strict=True)
            ]
            rows.append(
                {
                    "setting": name,
                    "loader": loader,
                    "samples_per_s": span([r["samples_per_s"] for r in rs]),
                    "vs_defaults": span(ratios, ".2f"),
                    "data_wait_share": span([r["data_wait_share"] for r in rs], ".2f"),
                    "data_wait_p95_ms": span([r["data_wait_p95_ms"] for r in rs]),
                    "compute_ms": span([r["compute_ms"] for r in rs]),
                    "runs": rs,
                }
            )
        out["codecs"][codec] = {"tuner": tuned, "rows": rows}
        print(f"\n{codec}: tuner {json.dumps({k: v for k, v in tuned.items() if k != 'loader'})}")
        head = ("samples/s", "vs defaults", "wait share", "wait p95 ms")
        print(f"{'setting':44} {head[0]:>22} {head[1]:>18} {head[2]:>18} {head[3]:>20}")
        for r in rows:
            print(
                f"{r['setting']:44} {r['samples_per_s']:>22} {r['vs_defaults']:>18} "
                f"{r['data_wait_share']:>18} {r['data_wait_p95_ms']:>20}"
            )
    out.update(
        {
            "command": "bench/data/loader.py" + (" --smoke" if args.smoke else ""),
            "repeats": repeats,
            "warmup_steps": warmup,
            "measured_steps": steps,
            "images": images,
            "cpus": os.cpu_count(),
            "machine": platform.machine(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "commit": subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
            ).stdout.strip(),
            "date": time.strftime("%Y-%m-%d"),
        }
    )
    RESULTS.mkdir(exist_ok=True)
    name = "loader-smoke.json" if args.smoke else "loader.json"
    (RESULTS / name).write_text(json.dumps(out, indent=1) + "\n")
    print(f"\nwritten to {RESULTS / name}")
    return 0


def _short(loader: dict[str, Any]) -> str:
    from workers.loader_settings import LoaderSettings

    return LoaderSettings(**loader).describe()


if __name__ == "__main__":
    raise SystemExit(main())
