"""The Pollux benchmark's gate per application (issue 26): means per workload can hide errors
that cancel (one application too slow, another too fast), so :mod:`pollux` also compares each
application's mean JCT with the published one.

The published figures are ``bench/data/pollux/published-per-app.json``, derived from the
artifact's per-job result files by :mod:`published_per_app`. The gate is on the aggregate per
load, policy and application over the workloads run (all eight in the full benchmark): the
mean JCT of all that application's jobs, job-weighted, within :data:`GATE` of the published
one. A cell (one workload, one application) holds as few as one job (imagenet at load 0.5), so
its ratio swings with one job's luck of the queue; the cells are counted (how many within
:data:`GATE`) for information, not gated.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

DERIVED = Path(__file__).resolve().parents[1] / "data" / "pollux" / "published-per-app.json"
GATE = 0.10
"""An application passes when its mean JCT over the workloads is within 10% of the published."""
REPRODUCTIONS = ("tiresias", "pollux")
"""The policies the gate applies to (the others are compared for information)."""

Published = dict[tuple[str, float, int], dict[str, tuple[int, int]]]
"""(policy, load, workload) -> application -> (jobs, sum of JCTs in s)."""


def load_published(path: Path = DERIVED) -> Published:
    """Read the derived file: per policy, load, workload and application, (jobs, JCT sum)."""
    doc = json.loads(path.read_text())["published"]
    return {
        (policy, float(load), int(wl.rsplit("-", 1)[1])): {
            app: (a["jobs"], a["jct_sum"]) for app, a in apps.items()
        }
        for policy, loads in doc.items()
        for load, workloads in loads.items()
        for wl, apps in workloads.items()
    }


def aggregate(rows: list[dict[str, Any]], published: Published) -> list[dict[str, Any]]:
    """Per load, policy and application: the mean JCT over the rows' workloads against the
    published one over the same workloads, the ratio, each cell's ratio, and the gate.

    Args:
        rows: :func:`pollux.run_one` results with every job of their workload (each carries
            ``published_against``, the published policy it is compared with).
        published: :func:`load_published`.
    """
    cells: dict[tuple[float, str, str], dict[int, tuple[int, float, int, int]]] = defaultdict(dict)
    against = {}
    for r in rows:
        key = (r["published_against"], r["load"], r["workload"])
        against[r["policy"]] = r["published_against"]
        for app, (pub_jobs, pub_sum) in published[key].items():
            mine = r["apps"].get(app, {"jobs": 0, "mean_jct": 0.0})
            done, total = mine["jobs"], mine["jobs"] * mine["mean_jct"]
            cells[(r["load"], r["policy"], app)][r["workload"]] = (done, total, pub_jobs, pub_sum)
    out = []
    for (load, policy, app), by_wl in cells.items():
        done = sum(c[0] for c in by_wl.values())
        jobs = sum(c[2] for c in by_wl.values())
        mean = sum(c[1] for c in by_wl.values()) / done if done else float("nan")
        pub = sum(c[3] for c in by_wl.values()) / jobs
        ratios = {wl: (c[1] / c[0]) / (c[3] / c[2]) for wl, c in sorted(by_wl.items()) if c[0]}
        ok = done == jobs and abs(mean / pub - 1) <= GATE
        out.append(
            {
                "load": load,
                "policy": policy,
                "published_against": against[policy],
                "app": app,
                "jobs": jobs,
                "completed": done,
                "mean_jct": mean,
                "published": pub,
                "ratio": mean / pub,
                "cell_ratios": ratios,
                "cells_within": sum(abs(x - 1) <= GATE for x in ratios.values()),
                "gate": ("pass" if ok else "fail") if policy in REPRODUCTIONS else "-",
            }
        )
    return out


def print_tables(agg: list[dict[str, Any]], policies: list[str], loads: list[float]) -> None:
    """Print the per-application table (mean JCT against published, ratio, cells within the
    gate), then one line per load and policy: each application's ratio and the gate."""
    print(f"\nper application, over the workloads run ({GATE:.0%} gate on each application's mean)")
    print(
        f"{'load':>4} {'policy':<16} {'vs':<9} {'app':<12} {'jobs':>5} {'mean JCT':>9} "
        f"{'published':>9} {'ratio':>6} {'cells':>5} gate"
    )
    for a in agg:
        cells = f"{a['cells_within']}/{len(a['cell_ratios'])}"
        print(
            f"{a['load']:>4} {a['policy']:<16} {a['published_against']:<9} {a['app']:<12} "
            f"{a['jobs']:>5} {a['mean_jct']:>9.0f} {a['published']:>9.0f} {a['ratio']:6.3f} "
            f"{cells:>5} {a['gate']}"
        )
    apps = sorted({a["app"] for a in agg})
    print(f"\n{'load':>4} {'policy':<16} {'vs':<9} " + " ".join(f"{x:>11}" for x in apps) + " gate")
    for load in loads:
        for p in policies:
            mine = {a["app"]: a for a in agg if a["load"] == load and a["policy"] == p}
            if not mine:
                continue
            ratios = " ".join(
                f"{mine[x]['ratio']:>11.3f}" if x in mine else f"{'-':>11}" for x in apps
            )
            gate = "-"
            if p in REPRODUCTIONS:
                gate = "pass" if all(a["gate"] == "pass" for a in mine.values()) else "fail"
            against = next(iter(mine.values()))["published_against"]
            print(f"{load:>4} {p:<16} {against:<9} {ratios} {gate}")
