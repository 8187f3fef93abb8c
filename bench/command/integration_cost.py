"""What the Hugging Face integration's callback (workers/integrations/hf.py, issue 38) costs a
Trainer step: examples/hf_causal_lm run by the worker (``workers.command.run_command``, as a
job's rank runs) as shipped (``hf.train``: OrchCallback reports each step, polls for a stop,
agrees it over the ranks) and with ``trainer.train()`` instead (no callback: the step hook
measures it), alternating, the same settings; orch's own p50 step time and samples/s of each
run (warm-up steps left out), medians over the rounds.

    .venv/bin/python bench/command/integration_cost.py --rounds 5 --steps 80
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import threading
from pathlib import Path
from typing import Any

from orchestrator.workdir import pack
from workers.command import run_command

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "hf_causal_lm"
WITH = "hf.train(trainer, seq_len=SEQ_LEN)  # orch: was trainer.train()"


def folder(variant: str, into: Path) -> Path:
    """The example as shipped (``callback``), or with ``trainer.train()`` (``bare``)."""
    out = into / variant
    shutil.copytree(EXAMPLE, out)
    if variant == "bare":
        script = out / "train.py"
        text = script.read_text()
        assert WITH in text, "the example's hf.train line changed: update the benchmark"
        script.write_text(text.replace(WITH, "trainer.train()"))
    return out


def run(work: Path, steps: int, job: str) -> dict[str, Any]:
    packed = pack(work)
    cfg = {
        "workload": "python train.py",
        "workload_args": {},
        "micro_batch": 16,
        "grad_accum": 1,
        "precision": "fp32",
        "steps": steps,
        "duration_s": None,
        "warmup_steps": 5,
        "checkpoint_every": 0,
        "seed": 0,
        "command": {"argv": ["python", "train.py"], "settings": {}, "working_dir": packed.digest},
    }
    return run_command(
        cfg,
        job_id=job,
        rank=0,
        world_size=1,
        init_method=None,
        checkpoint_dir=None,
        report=None,
        report_every_s=1.0,
        should_stop=threading.Event().is_set,
        fence=lambda: True,
        num_threads=1,
        archive=packed.data,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--out", type=Path, default=None)
    cli = parser.parse_args()
    os.environ["HF_HUB_OFFLINE"] = "1"
    figures: dict[str, list[dict[str, float]]] = {"bare": [], "callback": []}
    with tempfile.TemporaryDirectory() as tmp:
        works = {v: folder(v, Path(tmp)) for v in figures}
        for r in range(cli.rounds):
            order = ["bare", "callback"] if r % 2 == 0 else ["callback", "bare"]
            for variant in order:
                result = run(works[variant], cli.steps, f"bench-{variant}")
                figures[variant].append(
                    {"p50_ms": result["p50_ms"], "samples_per_s": result["samples_per_s"]}
                )
                print(variant, figures[variant][-1], flush=True)
    summary = {
        v: {k: statistics.median(f[k] for f in runs) for k in ("p50_ms", "samples_per_s")}
        for v, runs in figures.items()
    }
    ratio = summary["callback"]["p50_ms"] / summary["bare"]["p50_ms"]
    print(json.dumps({"median": summary, "callback_over_bare_p50": round(ratio, 4)}))
    if cli.out is not None:
        cli.out.write_text(json.dumps({"runs": figures, "median": summary}, indent=1) + "\n")


if __name__ == "__main__":
    main()
