"""Run the Sia artifact's own simulator on its philly and saturn workloads and print the table.

The artifact (github.com/siasosp23/artifacts, `sia-simulator/`) is not vendored: fetch it and
give its checkout with --artifact; give a Python that has its requirements with --python (see
README.md beside this file for both). Each (policy, trace, workload) is one run of the
artifact's own command, as its `run_experiment.sh` gives it, with one workload CSV instead of the
folder (so runs can go two at a time and be timed one by one):

    sia:    multi_simulator.py W --policy=sia --policy_p_val=-0.5 --mip_lambda_a=0.01
            --mip_lambda_n=1.1 --interval=60 --project_throughput --share_max_replicas
    gavel:  multi_simulator.py W --policy=gavel --interval=360
    pollux: multi_simulator_unaware.py W --policy=pollux --interval=60 --policy_p_val=-1

BLAS is held to one thread (OpenBLAS's threads make the per-round throughput-model fits 5.7x
slower on 2 cores, with the same result). --fast-fit swaps autograd's gradient of the fit's
objective (`goodput._obj_fn`) for the same gradient written out (equal to 1e-12); it makes
the fits about 3x faster, but L-BFGS-B then stops at slightly different points in about a
quarter of fits, so a run with it is close to, not identical with, the artifact's.

Metrics per workload, as `utils/print_run_stats.py` computes them: mean JCT, p99 JCT
(`sorted(jcts)[int(0.99 * n)]`), makespan (last completion minus first submission).

    python bench/scheduler/sia/artifact.py --artifact /tmp/sia --python /tmp/siavenv/bin/python \
        --out /tmp/sia-runs --policies sia gavel --traces philly saturn --workloads 1 --workers 2
    python bench/scheduler/sia/artifact.py --out /tmp/sia-runs --summarize
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

COMMANDS = {
    "sia": [
        "multi_simulator.py",
        "--policy=sia",
        "--policy_p_val=-0.5",
        "--mip_lambda_a=0.01",
        "--mip_lambda_n=1.1",
        "--interval=60",
        "--project_throughput",
        "--share_max_replicas",
    ],
    "gavel": ["multi_simulator.py", "--policy=gavel", "--interval=360"],
    "pollux": [
        "multi_simulator_unaware.py",
        "--policy=pollux",
        "--interval=60",
        "--policy_p_val=-1",
    ],
}
WORKLOADS = {"philly": 8, "saturn": 10}

# Table 3 of the paper (heterogeneous setting, 64 GPUs), averaged over each trace's workloads:
# mean JCT, p99 JCT, makespan, in hours ("Helios" is the saturn folder).
PUBLISHED = {
    ("philly", "sia"): (0.6, 9.5, 14.2),
    ("philly", "pollux"): (1.0, 14.9, 24.5),
    ("philly", "gavel"): (1.9, 30.0, 33.8),
    ("saturn", "sia"): (0.7, 10.9, 14.9),
    ("saturn", "pollux"): (1.0, 15.0, 25.5),
    ("saturn", "gavel"): (2.5, 38.7, 43.0),
}


def _obj_grad(
    params: Any, num_nodes: Any, num_replicas: Any, atomic_bsz: Any, accum_t: Any, optim_t: Any
) -> Any:
    """The gradient of the artifact's `goodput._obj_fn` (Pollux's throughput-model fit), by hand.

    Objective: RMSE of log compute time + RMSE of log step time + 1e-3 (gamma - 1)^2
    + 1e-2 ((beta_n / alpha_n)^2 + (beta_r / alpha_r)^2), with the step time
    (A^gamma + N^gamma)^(1/gamma), A = alpha_c + beta_c b, N = alpha + beta max(r - 2, 0).
    """
    import numpy as np

    ac, bc, an, bn, ar, br, g = (float(x) for x in params)
    n = len(atomic_bsz)
    compute = ac + bc * atomic_bsz
    inter = num_nodes > 1
    intra = (~inter) & (num_replicas > 1)
    rr = np.maximum(num_replicas - 2, 1e-8)
    network = (
        np.where(inter, an, np.where(intra, ar, 1e-8))
        + np.where(inter, bn, np.where(intra, br, 1e-8)) * rr
    )
    cg, ng = compute**g, network**g
    total = cg + ng
    d1 = np.log(compute) - np.log(accum_t)
    d2 = np.log(total) / g - np.log(optim_t)
    c1 = d1 / (n * np.sqrt((d1**2).mean()))
    c2 = d2 / (n * np.sqrt((d2**2).mean()))
    d_compute = c1 / compute + c2 * compute ** (g - 1) / total
    d_network = c2 * network ** (g - 1) / total
    d_gamma = c2 * (
        -np.log(total) / g**2 + (cg * np.log(compute) + ng * np.log(network)) / (g * total)
    )
    return np.array(
        [
            d_compute.sum(),
            (d_compute * atomic_bsz).sum(),
            (d_network * inter).sum() - 2e-2 * bn**2 / an**3,
            (d_network * inter * rr).sum() + 2e-2 * bn / an**2,
            (d_network * intra).sum() - 2e-2 * br**2 / ar**3,
            (d_network * intra * rr).sum() + 2e-2 * br / ar**2,
            d_gamma.sum() + 2e-3 * (g - 1),
        ]
    )


def _exec(script: str, argv: list[str], fast_fit: bool) -> None:
    """Run an artifact script in this (the artifact's) interpreter, its folder as cwd."""
    sys.path.insert(0, os.getcwd())
    if fast_fit:
        import types

        import goodput  # the artifact's module
        import numpy

        goodput.autograd = types.SimpleNamespace(numpy=numpy, grad=lambda f: _obj_grad)
    sys.argv = [script, *argv]
    runpy.run_path(script, run_name="__main__")


def run_one(
    artifact: Path, python: str, out: Path, policy: str, trace: str, n: int, fast_fit: bool
) -> dict[str, Any]:
    """One artifact run; its stdout, log and timing land in out/<policy>-<trace>/."""
    sim = artifact / "sia-simulator"
    folder = out / f"{policy}-{trace}"
    folder.mkdir(parents=True, exist_ok=True)
    script, *flags = COMMANDS[policy]
    log = folder / f"workload-{n}.log"
    argv = [f"workloads/{trace}/workload-{n}.csv", *flags, f"--output={log}"]
    cmd = [
        python,
        str(Path(__file__).resolve()),
        "--exec",
        script,
        *(["--fast-fit"] if fast_fit else []),
        "--",
        *argv,
    ]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    start = time.monotonic()
    with (folder / f"workload-{n}.stdout").open("w") as stdout:
        rc = subprocess.call(cmd, cwd=sim, env=env, stdout=stdout, stderr=subprocess.STDOUT)
    meta = {"command": " ".join(["python", script, *argv]), "fast_fit": fast_fit, "rc": rc}
    meta["wall_s"] = round(time.monotonic() - start, 1)
    (folder / f"workload-{n}.json").write_text(json.dumps(meta))
    return meta


def _last_line(path: Path) -> str:
    with path.open("rb") as f:
        f.seek(0, os.SEEK_END)
        pos, chunk = f.tell(), b""
        while pos > 0 and chunk.count(b"\n") < 2:
            step = min(1 << 20, pos)
            pos -= step
            f.seek(pos)
            chunk = f.read(step) + chunk
    return chunk.rstrip(b"\n").rsplit(b"\n", 1)[-1].decode()


def metrics(log: Path) -> dict[str, Any]:
    """Mean and p99 JCT and makespan (s) of one finished run, from its last log record."""
    jobs = json.loads(_last_line(log))["submitted_jobs"]
    jcts = sorted(j["completion_time"] - j["submission_time"] for j in jobs)
    return {
        "jobs": len(jcts),
        "mean_jct_s": sum(jcts) / len(jcts),
        "p99_jct_s": jcts[int(0.99 * len(jcts))],
        "makespan_s": max(j["completion_time"] for j in jobs)
        - min(j["submission_time"] for j in jobs),
        "jcts_s": jcts,
    }


def summarize(out: Path) -> list[dict[str, Any]]:
    """Every finished run under out, one row each, and print them with the published figures."""
    rows: list[dict[str, Any]] = []
    for meta_path in sorted(out.glob("*-*/workload-*.json")):
        policy, trace = meta_path.parent.name.split("-", 1)
        n = int(meta_path.stem.split("-")[1])
        meta = json.loads(meta_path.read_text())
        log = meta_path.with_suffix(".log")
        if meta["rc"] != 0 or not log.exists():
            continue
        rows.append({"trace": trace, "policy": policy, "workload": n, **meta, **metrics(log)})
    rows.sort(key=lambda r: (r["trace"], r["policy"], r["workload"]))
    print(
        "| trace | policy | workload | mean JCT (h) | p99 JCT (h) | makespan (h) | run (s) |",
        end="",
    )
    print(" fast fit |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r['trace']} | {r['policy']} | {r['workload']} | {r['mean_jct_s'] / 3600:.2f} | "
            f"{r['p99_jct_s'] / 3600:.2f} | {r['makespan_s'] / 3600:.2f} | {r['wall_s']:.0f} | "
            f"{'yes' if r['fast_fit'] else 'no'} |"
        )
    print()
    print("Over the workloads run (as print_run_stats.py: JCTs pooled, makespans averaged), and")
    print("Table 3 (all workloads); hours:")
    print()
    print("| trace | policy | workloads | mean JCT | p99 JCT | makespan | published |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for (trace, policy), (mean, p99, span) in PUBLISHED.items():
        runs = [r for r in rows if (r["trace"], r["policy"]) == (trace, policy)]
        if not runs:
            print(f"| {trace} | {policy} | 0 | | | | {mean} / {p99} / {span} |")
            continue
        pooled = sorted(j for r in runs for j in r["jcts_s"])
        avg_span = sum(r["makespan_s"] for r in runs) / len(runs)
        print(
            f"| {trace} | {policy} | {len(runs)} | {sum(pooled) / len(pooled) / 3600:.2f} | "
            f"{pooled[int(0.99 * len(pooled))] / 3600:.2f} | {avg_span / 3600:.2f} | "
            f"{mean} / {p99} / {span} |"
        )
    (out / "summary.json").write_text(json.dumps(rows, indent=1))
    return rows


def main() -> None:
    """Run the requested artifact runs, then print the table of every finished one."""
    if len(sys.argv) > 2 and sys.argv[1] == "--exec":
        rest = sys.argv[2:]
        script, fast = rest[0], "--fast-fit" in rest[: rest.index("--")]
        _exec(script, rest[rest.index("--") + 1 :], fast)
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--artifact", type=Path, help="checkout of siasosp23/artifacts")
    p.add_argument(
        "--python", default=sys.executable, help="a Python with the artifact's requirements"
    )
    p.add_argument("--out", type=Path, required=True, help="folder for logs and summary.json")
    p.add_argument("--policies", nargs="+", default=list(COMMANDS), choices=list(COMMANDS))
    p.add_argument("--traces", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    p.add_argument("--workloads", nargs="+", type=int, help="workload numbers (default: all)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--fast-fit", action="store_true", help="hand-written gradient in the fits")
    p.add_argument("--summarize", action="store_true", help="only print the table of finished runs")
    args = p.parse_args()
    if not args.summarize:
        if args.artifact is None:
            p.error("--artifact is required unless --summarize")
        todo = [
            (policy, trace, n)
            for trace in args.traces
            for n in (args.workloads or range(1, WORKLOADS[trace] + 1))
            if n <= WORKLOADS[trace]
            for policy in args.policies
        ]

        def one(job: tuple[str, str, int]) -> dict[str, Any]:
            policy, trace, n = job
            return run_one(args.artifact, args.python, args.out, policy, trace, n, args.fast_fit)

        with ThreadPoolExecutor(args.workers) as pool:
            for (policy, trace, n), meta in zip(todo, pool.map(one, todo), strict=True):
                print(
                    f"{policy} {trace} workload-{n}: rc={meta['rc']} {meta['wall_s']} s", flush=True
                )
    summarize(args.out)


if __name__ == "__main__":
    main()
