"""A picture of simulated runs: the JCT CDF and the pool's utilisation over time, per policy.

matplotlib is optional (the ``bench`` and ``dev`` extras): it is imported only here, only when a
plot is asked for, and without it :func:`plot_runs` draws nothing and says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from orchestrator.sim.metrics import SimResult


def _time_unit(span_s: float) -> tuple[float, str]:
    """Seconds per unit and its name, so a time axis reads in small numbers."""
    if span_s >= 2 * 86400:
        return 86400.0, "days"
    if span_s >= 2 * 3600:
        return 3600.0, "hours"
    if span_s >= 2 * 60:
        return 60.0, "minutes"
    return 1.0, "seconds"


def plot_runs(runs: Mapping[str, SimResult], total_gpus: int, path: Path) -> bool:
    """Draw the runs to ``path`` (PNG); False, and nothing drawn, without matplotlib.

    Left: the CDF of job completion times, as a fraction of all jobs (a policy that leaves jobs
    unfinished stays below 1). Right: GPUs held / pool GPUs over simulated time.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (cdf, util) = plt.subplots(1, 2, figsize=(11, 4.2))
    jct_max = max((r.jct or 0.0 for res in runs.values() for r in res.records), default=0.0)
    jct_div, jct_unit = _time_unit(jct_max)
    end = max((res.usage.time for res in runs.values()), default=0.0)
    t_div, t_unit = _time_unit(end)
    for name, res in runs.items():
        jcts = sorted(j for j in (r.jct for r in res.records) if j is not None)
        n = len(res.records)
        if jcts:
            xs = [0.0] + [j / jct_div for j in jcts]
            ys = [0.0] + [(i + 1) / n for i in range(len(jcts))]
            cdf.step(xs, ys, where="post", label=name)
        timeline = res.usage.timeline
        if timeline:
            ts = [t / t_div for t, _ in timeline] + [res.usage.time / t_div]
            us = [held / total_gpus for _, held in timeline]
            util.step(ts, [*us, us[-1]], where="post", label=name)
    cdf.set_xlabel(f"job completion time ({jct_unit})")
    cdf.set_ylabel("fraction of jobs")
    cdf.set_ylim(0, 1.02)
    cdf.set_title("JCT CDF")
    util.set_xlabel(f"simulated time ({t_unit})")
    util.set_ylabel(f"GPUs held / {total_gpus}")
    util.set_ylim(0, 1.02)
    util.set_title("Utilisation")
    for ax in (cdf, util):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
