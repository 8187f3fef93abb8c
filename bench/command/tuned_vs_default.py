"""The tuned settings against the script's own defaults (issue 38's benchmark), for each
integration's example: the shipped tuner (``orchestrator.tuner.service.tune_spec``, what
``orch tune --working-dir . job.yaml`` calls: its command evaluator runs each trial as a job
run of the script, sandboxed) tunes the example's job file against its own SLA on one device
of this host; then the script runs at its own defaults (its batch size in one micro-batch,
fp32, the default loader) and at the config the tuner chose, alternating, each run measured
the same way as a job's run (``workers.command.run_command``: warm-up steps left out, samples
and tokens per second from its step reports). Medians (min-max) over the rounds.

    .venv/bin/python bench/command/tuned_vs_default.py --rounds 3 --steps 30

``REDIS_URL`` names the Redis the tuner stores its study in (else an embedded server, started
in a temporary folder and stopped at the end). ``--smoke``: one example, a 2-trial tuning, one
short round.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES: dict[str, int] = {
    "prepared_loop": 32,  # DataLoader(batch_size=32)
    "hf_causal_lm": 16,  # TrainingArguments(per_device_train_batch_size=16)
    "lightning_module": 16,  # CharLM(batch_size=16)
    "torchrun_script": 32,  # --batch-size 32
}
"""Each example and the batch size its script uses on its own (one rank, no accumulation)."""


def job_spec(example: str, digest: str, trials: int) -> Any:
    """The example's job file, tuned (its own SLA, default bounds) on one device, its
    working directory ``digest``."""
    from orchestrator.spec import parse_spec

    data = yaml.safe_load((ROOT / "examples" / example / "job.yaml").read_text())
    data["workload"]["working_dir"] = digest
    data["resources"] = {"gpus": 1}  # this host's one device (the torchrun script: one rank)
    data["tuning"] = {"enabled": True, "budget": {"trials": trials}}
    return parse_spec(data)


def tune(spec: Any, store: Any, url: str) -> tuple[Any, dict[str, Any]]:
    """The tuner's chosen config for ``spec`` and its report (a fresh study, no cache)."""
    from orchestrator.tuner.service import tune_spec

    report = tune_spec(
        spec, store, url, job=f"{spec.name}-{uuid.uuid4().hex[:6]}", fresh=True, use_cache=False
    )
    chosen = report.result.best or report.result.closest
    if chosen is None:
        raise SystemExit(f"{spec.name}: the tuner found no config: {report.to_dict()['reason']}")
    return chosen.config, report.to_dict()


def measure(spec: Any, archive: bytes, config: Any, steps: int) -> dict[str, Any]:
    """One run of the script at ``config``: 3 warm-up then ``steps`` measured steps."""
    from orchestrator.runtime.harness_config import command_config
    from orchestrator.tuner.evaluators.command import CommandEvaluator

    evaluator = CommandEvaluator(
        command_config(spec.workload) or {},
        spec.workload.args,
        archive,
        job_id="bench-tuned",
        warmup_steps=3,
        measured_steps=steps,
        seed=spec.run.seed,
    )
    m = evaluator.evaluate(config)
    if m.status != "ok":
        raise SystemExit(f"{spec.name} at {config.describe()}: {m.status}: {m.message}")
    return {"samples_per_s": m.samples_per_s, "tokens_per_s": m.tokens_per_s, "p50_ms": m.p50_ms}


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def bench(example: str, store: Any, url: str, args: argparse.Namespace) -> dict[str, Any]:
    from orchestrator.run_config import Config
    from orchestrator.workdir import pack

    packed = pack(ROOT / "examples" / example)
    digest = store.working_dirs.put(packed.data)
    spec = job_spec(example, digest, args.trials)
    t0 = time.monotonic()
    tuned, report = tune(spec, store, url)
    tune_s = time.monotonic() - t0
    default = Config(micro_batch=EXAMPLES[example])
    print(
        f"{example}: tuned in {tune_s:.0f} s, {report['trials']} trials "
        f"({report['status']}): {tuned.describe()}",
        flush=True,
    )
    runs: dict[str, list[dict[str, Any]]] = {"default": [], "tuned": []}
    for r in range(args.rounds):
        order = ("default", "tuned") if r % 2 == 0 else ("tuned", "default")
        for name in order:
            runs[name].append(
                measure(spec, packed.data, default if name == "default" else tuned, args.steps)
            )
    unit = "tokens_per_s" if spec.sla.throughput.min_tokens_per_s is not None else "samples_per_s"
    ratios = [t[unit] / d[unit] for t, d in zip(runs["tuned"], runs["default"], strict=True)]
    return {
        "example": example,
        "sla": spec.sla.model_dump(exclude_none=True),
        "unit": unit,
        "default": default.describe(),
        "tuned": tuned.describe(),
        "tune_s": tune_s,
        "trials": report["trials"],
        "status": report["status"],
        "trials_table": [
            {"config": t["config"], "measurement": t["measurement"], "feasible": t["feasible"]}
            for t in report["trials_table"]
        ],
        "runs": runs,
        "default_rate": spread([d[unit] for d in runs["default"]]),
        "tuned_rate": spread([t[unit] for t in runs["tuned"]]),
        "ratio": spread(ratios),
    }


def table(results: list[dict[str, Any]]) -> str:
    def fmt(s: dict[str, float]) -> str:
        return f"{s['median']:,.0f} ({s['min']:,.0f}-{s['max']:,.0f})"

    lines = [
        "| example | unit | default | rate | tuned (trials) | rate | tuned / default |",
        "| --- | --- | --- | ---: | --- | ---: | ---: |",
    ]
    for r in results:
        ratio = r["ratio"]
        lines.append(
            f"| {r['example']} | {r['unit'].replace('_per_s', '/s')} | {r['default']} | "
            f"{fmt(r['default_rate'])} | {r['tuned']} ({r['trials']}) | {fmt(r['tuned_rate'])} "
            f"| {ratio['median']:.2f}x ({ratio['min']:.2f}-{ratio['max']:.2f}) |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", default=",".join(EXAMPLES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30, help="measured steps a run")
    parser.add_argument("--trials", type=int, default=8, help="the tuner's trial budget")
    parser.add_argument("--out", default="tuned_vs_default")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.examples, args.rounds, args.steps, args.trials = "prepared_loop", 1, 5, 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from orchestrator.config import Settings
    from orchestrator.services import open_store
    from orchestrator.store.server import EmbeddedRedis

    data = Path(tempfile.mkdtemp(prefix="orch-bench-tuned-"))
    settings = Settings(
        redis_url=os.environ.get("REDIS_URL") or None,
        data_dir=data,
        namespace=f"bench-tuned-{uuid.uuid4().hex[:6]}",
    )
    store, url = open_store(settings)
    try:
        results = [bench(e, store, url, args) for e in args.examples.split(",")]
    finally:
        store.delete_namespace()
        if settings.redis_url is None:
            EmbeddedRedis(data).stop()
    print(table(results))
    if not args.smoke:
        out = Path(__file__).parent / "results" / f"{args.out}.json"
        out.write_text(json.dumps({"args": vars(args), "results": results}, indent=1) + "\n")
        print(f"raw: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
