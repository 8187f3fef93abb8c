"""``decide`` CPU time per round of the mixed benchmark, policies side by side (issue 26 part 4).

    python bench/scheduler/decide_cost.py --days 7 --tight-deadlines \
        --policies shared-goodput,shared

Runs :func:`mixed.run_one` for each policy in this process, one after the other, with every
``decide`` call wrapped in ``time.process_time``; prints the rounds, the total ``decide`` CPU
time, its p50 / p99 per round, and the whole simulation's CPU time. A throwaway-sized driver
kept so the figure in README.md can be re-run; nothing is written.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mixed

from policies import Decision, Snapshot
from policies.scheduling import SchedulingPolicy


def _timed(
    make: Callable[[str, float], SchedulingPolicy], times: list[float]
) -> Callable[[str, float], SchedulingPolicy]:
    """``make``, its policies' ``decide`` calls timed into ``times``."""

    def timed(name: str, reserve: float) -> SchedulingPolicy:
        policy = make(name, reserve)
        decide = policy.decide

        def wrapped(snapshot: Snapshot) -> list[Decision]:
            t0 = time.process_time()
            out = decide(snapshot)
            times.append(time.process_time() - t0)
            return out

        policy.decide = wrapped  # type: ignore[method-assign]
        return policy

    return timed


def main() -> None:
    """Parse the arguments, run each policy, print one line each."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--tight-deadlines", action="store_true")
    ap.add_argument("--policies", default="shared-goodput,shared")
    args = ap.parse_args()
    run = argparse.Namespace(
        start="2017-10-16",
        days=args.days,
        speed=3.0,
        interactive_load=0.10,
        nodes=128,
        gpus_per_node=8,
        interval=60.0,
        tight_deadlines=args.tight_deadlines,
    )
    make = mixed.make_policy
    for name in args.policies.split(","):
        times: list[float] = []
        setattr(mixed, "make_policy", _timed(make, times))  # noqa: B010 (mypy: a module function)
        t0 = time.process_time()
        row = mixed.run_one(name, run)
        cpu = time.process_time() - t0
        ts = sorted(times)
        print(
            f"{name:<16} rounds {len(ts)} decide CPU {sum(ts):.1f} s "
            f"p50 {1e3 * ts[len(ts) // 2]:.2f} ms p99 {1e3 * ts[int(len(ts) * 0.99)]:.2f} ms "
            f"simulation CPU {cpu:.1f} s bulk mean JCT {row['bulk_mean_jct']:.0f} s",
            flush=True,
        )
    setattr(mixed, "make_policy", make)  # noqa: B010


if __name__ == "__main__":
    main()
