"""Every GPU measurement of issue 15 in one script, for a lent single-GPU machine (H100/H200).

    python3 bench/gpu/run.py                          # all sections, ~7-8 min on an H100
    python3 bench/gpu/run.py --sections mfu,tuned     # a subset (names below)
    .venv/bin/python bench/gpu/run.py --cpu-smoke     # every section tiny on the CPU (~30 s)

Sections (``bench/gpu/sections.py``), each on the ``gpt`` workload through the worker harness
(``workers.harness.Harness``) in this process, no Ray, no Redis:

- ``mfu``: model FLOPs utilisation of a bf16 run (FLOPs per token ``6 N + 12 L T d``, see
  ``measure.FLOPS_FORMULA``) against the data-sheet dense bf16 peak and against a measured
  8192^3 bf16 matmul (CUDA events, after warm-up): the practical ceiling.
- ``tuned``: the shipped tuner (``sla`` strategy, throughput goal, harness trials on the GPU)
  and its best config against the settings a job runs untuned (``orchestrator.spec.RunSettings``
  defaults: micro-batch 32, fp32), alternated: samples/s and p95.
- ``precision``: fp32, bf16, fp16 (the harness's GradScaler): samples/s, p95, every step's loss
  finite, the scaler's final scale, and each one's joules per sample (NVML's energy counter)
  and GPU busy share.

Every run also records its own peak memory (restarted per run), data-wait share, GPU busy
share and energy per sample (``bench/gpu/measure.py``; ``None`` where NVML has no counter).
- ``ddp``: a one-rank NCCL process group (``tcp://127.0.0.1``), the model in DDP and the
  harness's per-step collectives on it, against the plain run (two ranks on one GPU are refused
  by NCCL, so none is tried).
- ``compile``: ``torch.compile`` against eager: samples/s, p95 and compile time (first step).
- ``serve``: the shipped service load test (``workers.serve_run.load_test``: seeded Poisson
  arrivals on a virtual clock, each batch a real timed forward of the ``infer`` GPT) at a few
  offered loads, unbatched against two fixed batchers, fp32 against bf16: request p50/p99,
  served requests/s, dropped requests, mean batch.
- ``guard``: the SLA guard on a real GPU run reporting every second with the shipped window,
  slowed on purpose after 60 s, replayed through ``orchestrator.control.guard`` as
  ``bench/guard/noise.py`` does: false trips before the slowdown, detection time after.

Each run excludes its first steps (``warmup``: 3, 5 under compile); variants are alternated
over repeats and reported as medians with min-max, ratios per round. A section that fails is
recorded with its error and the others run; the JSON is rewritten after every section, so a
call cut short keeps what was done. Output: ``--out``, by default ``$OUT/gpu.json`` when ``OUT``
is set, else ``bench/gpu/results/gpu.json``.

The GPU machine has torch, numpy, pyyaml (and typer, rich, fsspec, psutil...) but not the rest
of the project's dependencies. The harness needs ``ddsketch`` (and ``six``; ``nvidia-ml-py``
for NVML telemetry, optional); the ``tuned`` section needs ``pydantic`` (the job spec, imported
by ``orchestrator.runtime.harness_config``), ``optuna`` (the study; it imports ``colorlog``,
``tqdm``, ``packaging``; ``sqlalchemy``/``alembic`` only for RDB storages, not used) and
``scipy`` (``nnls`` in the ``sla`` strategy's model). Wheels for Python 3.12, x86-64 Linux,
about 38 MB, into a git-ignored folder carried to the machine::

    .venv/bin/pip download --no-deps --only-binary=:all: --python-version 3.12 \\
        --implementation cp --abi cp312 --platform manylinux_2_17_x86_64 \\
        --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 -d bench/out/whl \\
        optuna==5.0.0 colorlog tqdm packaging pydantic==2.14.3 pydantic-core==2.50.4 \\
        annotated-types typing-extensions typing-inspection ddsketch==3.0.1 six \\
        nvidia-ml-py scipy==1.17.1

(scipy 1.17 needs numpy >= 1.26.4; pydantic-core's version must be the one pydantic pins.)
Then, on the machine (the ``run`` tool with ``carry=["bench/out/whl"]``), all in one call
(~8 min) or in two of ~4 min each (``--sections mfu,tuned,precision`` then
``--sections ddp,compile,guard``, each with its own ``--out``)::

    python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/site \
        bench/out/whl/*.whl && PYTHONPATH=/tmp/site python3 bench/gpu/run.py

Without the wheels the harness cannot import (``ddsketch``) and every section records that.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.gpu.measure import Profile  # noqa: E402

RESULTS = Path(__file__).parent / "results"

GPU = Profile(
    name="gpu",
    device="cuda:0",
    # GPT-2 small's geometry (12 x 768, 12 heads) at 512 tokens and a 32k vocabulary: 110 M
    # parameters in matmuls; fp32 at micro-batch 32 (the untuned default) is ~0.3 s a step
    gpt={"n_layer": 12, "d_model": 768, "n_head": 12, "seq_len": 512, "vocab": 32768},
    micro_batch=32,
    warmup=3,
    steps=20,
    repeats=3,
    matmul_n=8192,
    tune_micro_batches=(8, 16, 32, 64, 128),
    tune_trials=12,
    tune_seconds=120.0,
    tune_steps=(2, 6),
    compile_repeats=2,
    compile_backend=None,
    guard_seconds=95.0,
    guard_slow_after=60.0,
    guard_warm=32.0,  # the window (30 s) is full from then on
    guard_slow_frac=0.3,
    guard_slow_ms=0.0,
)

CPU_SMOKE = Profile(
    name="cpu-smoke",
    device="cpu",
    gpt={"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 16, "vocab": 64},
    micro_batch=4,
    warmup=1,
    steps=4,
    repeats=2,
    matmul_n=256,
    tune_micro_batches=(2, 4, 8),
    tune_trials=4,
    tune_seconds=20.0,
    tune_steps=(1, 2),
    compile_repeats=1,
    compile_backend="eager",  # dynamo's tracing without inductor's C++ build: plumbing only
    # 4 s of slowed steps after 3 s at speed: the window is mostly slow steps by the end, even
    # when a loaded machine's first steps were slow too (5 s with 2.5 slowed missed once, under
    # a full suite's load)
    guard_seconds=7.0,
    guard_slow_after=3.0,
    guard_warm=0.0,
    # steps 4x slower and then some: far above a loaded CI machine's noise (a doubling was
    # missed there); the smoke checks the section's plumbing, the GPU run its sensitivity
    guard_slow_frac=3.0,
    guard_slow_ms=20.0,
    nominal_peak=1e12,
    threads=1,  # 2 shared cores: more threads spin against other work (steps 100x slower)
    serve_rates=(50.0, 200.0),
    serve_seconds=0.5,
)


def main(argv: list[str] | None = None) -> int:
    """Run the chosen sections, write the JSON, print a table; returns the exit status."""
    from bench.gpu.sections import SECTIONS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated subset")
    ap.add_argument("--out", type=Path, default=None, help="the JSON file to write")
    ap.add_argument("--cpu-smoke", action="store_true", help="every section tiny on the CPU")
    args = ap.parse_args(argv)
    chosen = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SECTIONS]
    if unknown or not chosen:
        print(f"error: unknown sections {unknown}; valid: {', '.join(SECTIONS)}", file=sys.stderr)
        return 2
    if args.cpu_smoke:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the tuner's trials too, on a GPU machine
    import torch

    if not args.cpu_smoke and not torch.cuda.is_available():
        print(
            "no CUDA device: this benchmark measures a GPU; use --cpu-smoke to test it on the CPU",
            file=sys.stderr,
        )
        return 2
    profile = CPU_SMOKE if args.cpu_smoke else GPU
    # Every run collects garbage before it starts (its memory figures are its own, and a
    # failed run's tensors are freed): with what is loaded by now (torch above all) out of
    # the collector's passes, a pass takes milliseconds, not a fifth of a second (the smoke's
    # sections spent half their CPU time in them). Nothing loaded here is ever freed anyway.
    gc.collect()
    gc.freeze()
    if profile.threads is not None:
        torch.set_num_threads(profile.threads)
    out = args.out or (
        Path(os.environ["OUT"]) / "gpu.json" if os.environ.get("OUT") else RESULTS / "gpu.json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {"machine": _machine(profile), "profile": _profile(profile)}
    doc["sections"] = sections = {}
    for name in chosen:
        print(f"[{name}] ...", flush=True)
        t0 = time.perf_counter()
        try:
            entry: dict[str, Any] = {"status": "ok", "data": SECTIONS[name](profile)}
        except Exception as err:  # one section's failure must not cost the others
            entry = {
                "status": "error",
                "error": f"{type(err).__name__}: {err}"[:2000],
                "traceback": traceback.format_exc()[-4000:],
            }
        entry["seconds"] = round(time.perf_counter() - t0, 1)
        sections[name] = entry
        print(f"[{name}] {entry['status']} in {entry['seconds']} s", flush=True)
        out.write_text(json.dumps(doc, indent=1, default=str))
    print_table(doc)
    print(f"wrote {out}")
    return 0


def _machine(p: Profile) -> dict[str, Any]:
    import torch

    from bench.gpu.measure import device_name, nvml_facts

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {
        "device": device_name(p.device),
        "nvml": nvml_facts() if p.device.startswith("cuda") else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        # fp32 matmuls as a job runs them: full fp32 unless TF32 is allowed (off by default)
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": commit or None,
    }


def _profile(p: Profile) -> dict[str, Any]:
    import dataclasses

    return dataclasses.asdict(p)


def _rate(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f}"


def _j(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def headline(name: str, d: dict[str, Any]) -> str:
    """One line of a section's figures."""
    if name == "mfu":
        peak = "-" if d["mfu"] is None else f"{100 * d['mfu']:.1f}%"
        return (
            f"MFU {peak} of peak ({d['achieved_flops'] / 1e12:.2f} TFLOP/s), "
            f"{100 * d['mfu_of_matmul']:.1f}% of a {d['matmul']['n']}^3 matmul "
            f"({d['matmul']['median'] / 1e12:.1f} TFLOP/s)"
        )
    if name == "tuned":
        t, f = d["tuned"], d["default"]
        cfg = d["tuner"]["config"]
        return (
            f"tuned mb {cfg['micro_batch']} {cfg['precision']}: "
            f"{_rate(t['samples_per_s']['median'])}/s p95 {t['p95_ms']:.1f} ms vs default "
            f"{_rate(f['samples_per_s']['median'])}/s p95 {f['p95_ms']:.1f} ms "
            f"(x{t['ratio_to_default']['median']:.2f}; {d['tuner']['trials']} trials, "
            f"{d['tuner']['profiling_s']:.0f} s)"
        )
    if name == "precision":
        rates = ", ".join(
            f"{k} {_rate(d[k]['samples_per_s']['median'])}/s" for k in ("fp32", "bf16", "fp16")
        )
        scale = d["fp16"]["runs"][-1].get("scale")
        joules = ", ".join(f"{k} {_j(d[k].get('energy_per_sample_j'))}" for k in ("fp32", "bf16"))
        busy = ", ".join(f"{k} {_pct(d[k].get('gpu_busy_share'))}" for k in ("fp32", "bf16"))
        return (
            f"{rates}; fp16 loss finite {d['fp16_finite']}, scale {scale}; J/sample {joules}; "
            f"busy {busy}"
        )
    if name == "ddp":
        return (
            f"plain {_rate(d['plain']['samples_per_s']['median'])}/s, ddp "
            f"{_rate(d['ddp']['samples_per_s']['median'])}/s "
            f"(x{d['ddp']['ratio_to_plain']['median']:.3f}), backend {','.join(d['backend'])}"
        )
    if name == "compile":
        e, c = d["eager"], d["compile"]
        return (
            f"eager {_rate(e['samples_per_s']['median'])}/s p95 {e['p95_ms']:.1f} ms, compiled "
            f"{_rate(c['samples_per_s']['median'])}/s p95 {c['p95_ms']:.1f} ms "
            f"(x{c['ratio_to_eager']['median']:.2f}), compile {d['compile_s'][0]:.1f} s"
        )
    if name == "serve":
        best: dict[str, str] = {}
        for r in d["rows"]:
            if r["dropped"] == 0 and r["request_p99_ms"] is not None:
                best[f"{r['precision']} {r['batcher']}"] = (
                    f"{r['rate_rps']:g}/s p99 {r['request_p99_ms']:.1f} ms"
                )
        return "highest load without drops: " + "; ".join(f"{k} {v}" for k, v in best.items())
    if name == "guard":
        rows = {(r["check"], r["hold_s"]): r for r in d["rows"]}
        hold = 10.0 if ("throughput", 10.0) in rows else max(h for _, h in rows)
        parts = []
        for check in ("throughput", "latency"):
            r = rows[(check, hold)]
            det = "-" if r["detect_s"] is None else f"{r['detect_s']:.1f} s"
            parts.append(f"{check} {r['false_trips']} false, detected {det}")
        return f"hold {hold:g} s: " + "; ".join(parts)
    return ""


def print_table(doc: dict[str, Any]) -> None:
    """A section per line: status, seconds, its figures (or its error)."""
    print(f"\n{doc['machine']['device']}, torch {doc['machine']['torch']}")
    print(f"{'section':<10} {'status':<6} {'s':>6}  figures")
    for name, e in doc["sections"].items():
        if e["status"] == "ok":
            try:
                text = headline(name, e["data"])
            except (KeyError, TypeError, ValueError, ZeroDivisionError) as err:
                text = f"(figures in the JSON; no headline: {type(err).__name__})"
        else:
            text = e["error"].splitlines()[0][:150]
        print(f"{name:<10} {e['status']:<6} {e['seconds']:>6}  {text}")


if __name__ == "__main__":
    sys.exit(main())
