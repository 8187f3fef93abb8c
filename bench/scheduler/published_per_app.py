"""Derive ``bench/data/pollux/published-per-app.json`` from the Pollux artifact's result files.

    .venv/bin/python bench/scheduler/published_per_app.py RESULTS_JOBLOAD_DIR

``RESULTS_JOBLOAD_DIR`` is ``simulator/results-jobload/`` of the public artifact of the Pollux
paper (repository petuum/adaptdl, branch ``osdi21-artifact``): its ``<policy>-<load>/
summary.json`` hold the published JCT of every job, ``{"jcts": {"workload-N": {"<app>-<i>":
seconds}}}``. For Pollux and Tiresias at loads 1.0 and 0.5 this writes, per workload and
application, the job count and the sum of the published JCTs (both integers: exact, and the
mean is their quotient), then checks that each workload's mean JCT equals the summary's own
``avgs`` entry. The benchmark (:mod:`pollux`) reads the derived file; the network is not needed
to run it.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "data" / "pollux" / "published-per-app.json"
RUNS = (("pollux", "1.0"), ("pollux", "0.5"), ("tiresias", "1.0"), ("tiresias", "0.5"))
SOURCE = (
    "petuum/adaptdl, branch osdi21-artifact (commit c793c7089bd307462686339d29707925c461f9a9), "
    "simulator/results-jobload/<policy>-<load>/summary.json"
)


def app_of(job: str) -> str:
    """The application of a job named ``<app>-<index>`` (``cifar10-3`` -> ``cifar10``)."""
    return job.rsplit("-", 1)[0]


def per_app(jcts: dict[str, dict[str, int]]) -> dict[str, dict[str, dict[str, int]]]:
    """Per workload and application: ``{"jobs": count, "jct_sum": seconds}``, sorted by name."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for workload in sorted(jcts, key=lambda w: int(w.rsplit("-", 1)[1])):
        acc: dict[str, dict[str, int]] = defaultdict(lambda: {"jobs": 0, "jct_sum": 0})
        for job, jct in jcts[workload].items():
            if jct != int(jct):
                raise ValueError(f"{workload} {job}: JCT {jct} is not a whole number of seconds")
            acc[app_of(job)]["jobs"] += 1
            acc[app_of(job)]["jct_sum"] += int(jct)
        out[workload] = {app: acc[app] for app in sorted(acc)}
    return out


def check(derived: dict[str, dict[str, dict[str, int]]], avgs: dict[str, float]) -> None:
    """Raise unless each workload's mean JCT from ``derived`` equals the summary's ``avgs``."""
    for workload, apps in derived.items():
        mean = sum(a["jct_sum"] for a in apps.values()) / sum(a["jobs"] for a in apps.values())
        if abs(mean - avgs[workload]) > 1e-6:
            raise ValueError(f"{workload}: derived mean {mean} != published {avgs[workload]}")


def dump(doc: Mapping[str, object]) -> str:
    """``doc`` as JSON with one line per workload (about 8 kB in all)."""
    text = json.dumps(doc, indent=1)
    # fold each workload's object (the deepest nesting, indent 4) onto its line
    return re.sub(r"\n {5,}(?=\S)|\n {4}(?=\})", " ", text) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Read the four summary files, write the derived file."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results_jobload", type=Path, help="the artifact's results-jobload/ folder")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    runs: dict[str, dict[str, object]] = defaultdict(dict)
    for policy, load in RUNS:
        summary = json.loads(
            (args.results_jobload / f"{policy}-{load}" / "summary.json").read_text()
        )
        derived = per_app(summary["jcts"])
        check(derived, summary["avgs"])
        runs[policy][load] = derived
    doc = {
        "source": SOURCE,
        "derived_by": "bench/scheduler/published_per_app.py",
        "fields": "policy -> load -> workload -> application -> jobs, jct_sum (s)",
        "published": runs,
    }
    args.out.write_text(dump(doc))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
