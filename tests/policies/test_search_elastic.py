"""``elastic="search"``: the genetic allocator's objective, optimised exactly (issue 26, part 4)."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import numpy as np
import pytest

from policies.elastic import ELASTIC, ElasticJob, GeneticElastic, GoodputElastic, SearchElastic
from policies.elastic.search import EXACT_CELLS as EXACT_CELLS_DEFAULT
from policies.elastic.search import _Cells, best_counts

DIP = (1.0, 1.9, 2.7, 3.4, 3.0, 4.6, 6.0, 7.2)  # a GPU on a second node costs before it pays
LINEAR = tuple(float(n) for n in range(1, 9))
FLAT = (1.0, 1.2, 1.3, 1.35, 1.4, 1.4, 1.4, 1.4)


def _brute(cost: np.ndarray, gpus: int) -> float:
    best = np.inf
    for ks in itertools.product(*(range(cost.shape[1]) for _ in range(cost.shape[0]))):
        if sum(ks) <= gpus:
            best = min(best, sum(cost[i, k] for i, k in enumerate(ks)))
    return float(best)


def _random_costs(rng: random.Random) -> tuple[np.ndarray, int]:
    jobs, width = rng.randint(1, 4), rng.randint(1, 5)
    cost = np.array([[rng.random() for _ in range(width)] for _ in range(jobs)])
    for i in range(jobs):
        cost[i, rng.randint(0, width - 1) + 1 :] = np.inf  # beyond the job's cap
    return cost, rng.randint(0, 9)


def test_registered_and_checks_its_arguments() -> None:
    assert isinstance(ELASTIC.create("search"), SearchElastic)
    with pytest.raises(ValueError, match="exact_cells must be >= 0"):
        SearchElastic(exact_cells=-1)


def test_the_exact_program_finds_the_optimum() -> None:
    rng = random.Random(7)
    for _ in range(200):
        cost, gpus = _random_costs(rng)
        got = best_counts(cost, gpus)
        assert int(got.sum()) <= gpus
        assert sum(cost[i, k] for i, k in enumerate(got)) == pytest.approx(_brute(cost, gpus))


def test_the_price_is_feasible_and_optimal_on_convex_costs() -> None:
    rng = random.Random(11)
    for _ in range(200):
        cost, gpus = _random_costs(rng)
        got = best_counts(cost, gpus, exact_cells=0)
        assert int(got.sum()) <= gpus and np.isfinite(cost[np.arange(len(got)), got]).all()
        # convex rows (each GPU drops the cost less than the one before): no relaxation gap
        jobs, width = cost.shape
        drops = -np.sort(np.array([[rng.random() for _ in range(width - 1)] for _ in range(jobs)]))
        convex = np.cumsum(np.concatenate([np.zeros((jobs, 1)), drops[:, ::-1]], 1), 1)
        got = best_counts(convex, gpus, exact_cells=0)
        assert sum(convex[i, k] for i, k in enumerate(got)) == pytest.approx(_brute(convex, gpus))


def test_its_table_is_the_genetic_allocators_problem() -> None:
    jobs = [
        ElasticJob("a", 2, 8, 2, speedup=LINEAR),
        ElasticJob("b", 1, 8, 1, current=3, speedup=FLAT[:5], run_s=600.0, lost_s=120.0),
        ElasticJob("c", 1, 8, 1, speedup=DIP),
        ElasticJob("d", 1, 6, 1, current=1, run_s=50.0),  # no curve: linear
    ]
    size = {"a": 2, "b": 1, "c": 1, "d": 1}
    mine = SearchElastic(p=-1.0).costs(jobs, size, 7, 4, 30.0)
    theirs = GeneticElastic().problem(jobs, size, 7, 4, 30.0)
    within = np.arange(mine.shape[1])[None, :] <= theirs.cap[:, None]
    assert mine.shape == theirs.cost.shape
    assert np.allclose(mine[within], theirs.cost[within])
    assert np.isinf(mine[~within]).all()
    assert np.allclose(SearchElastic(p=-1.0).costs(jobs, size, 7, 4, 30.0), mine)  # cached


def test_crosses_a_dip_in_the_speedup_curve_where_greedy_goodput_stops() -> None:
    jobs = [ElasticJob("yolo", 1, 8, 1, speedup=DIP)]
    assert GoodputElastic("harmonic").allocate(jobs, 8, 30.0) == {"yolo": 4}
    assert SearchElastic().allocate(jobs, 8, 30.0) == {"yolo": 8}
    assert SearchElastic(exact_cells=0).allocate(jobs, 8, 30.0) == {"yolo": 8}


def test_a_running_job_moves_only_when_it_pays_for_its_restart_and_lost_work() -> None:
    new = ElasticJob("new", 1, 8, 1, speedup=LINEAR)
    young = ElasticJob("big", 1, 8, 1, current=7, speedup=LINEAR, run_s=1.0)
    for alloc in (SearchElastic(), SearchElastic(exact_cells=0)):
        assert alloc.allocate([young, new], 8, 30.0) == {"big": 7, "new": 1}
        old = replace(young, run_s=1e6)  # the harmonic mean wants them even: 4 and 4
        assert alloc.allocate([old, new], 8, 30.0) == {"big": 4, "new": 4}
        # ten minutes on its GPUs, a day of unsaved work: any move costs far more than it gains
        unsaved = replace(old, run_s=600.0, lost_s=86_400.0)
        assert alloc.allocate([unsaved, new], 8, 30.0) == {"big": 7, "new": 1}
    # the sticky goodput allocator keeps the job that grew alone where it is
    assert GoodputElastic().allocate([replace(young, run_s=1e6), new], 8, 30.0)["big"] == 7


def test_admission_floors_and_urgent_jobs_come_before_the_search() -> None:
    jobs = [
        ElasticJob("calm", 1, 4, 1, current=1, speedup=LINEAR[:4], run_s=1e6),
        ElasticJob("kept", 1, 4, 1, current=2, speedup=FLAT[:4], floor=2, run_s=10.0),
        ElasticJob("short", 1, 4, 1, current=1, speedup=FLAT[:4], run_s=1e6, urgent=True),
        ElasticJob("late", 3, 4, 3, speedup=LINEAR[:4]),
    ]
    got = SearchElastic().allocate(jobs, 6, 30.0)
    assert got == {"calm": 1, "kept": 2, "short": 3, "late": 0}


def test_both_paths_keep_the_contract_and_are_deterministic() -> None:
    rng = random.Random(3)
    curves = (LINEAR, FLAT, DIP, ())
    for _ in range(50):
        jobs = [
            ElasticJob(
                f"j{i}",
                lo := rng.randint(1, 3),
                rng.randint(lo, 8),
                lo,
                current=rng.choice((0, 0, rng.randint(1, 8))),
                speedup=rng.choice(curves),
                run_s=rng.uniform(0, 3600),
                lost_s=rng.uniform(0, 600),
            )
            for i in range(rng.randint(1, 12))
        ]
        gpus = rng.randint(0, 40)
        for alloc in (SearchElastic(), SearchElastic(exact_cells=0)):
            got = alloc.allocate(jobs, gpus, 30.0)
            assert got == alloc.allocate(jobs, gpus, 30.0)
            assert sum(got.values()) <= gpus
            assert all(got[j.job_id] == 0 or j.lo <= got[j.job_id] <= j.hi for j in jobs)
            # admission as every allocator: a job is left out only when its minimum cannot fit
            assert {j.job_id for j in jobs if got[j.job_id]} == {
                j.job_id for j in jobs if GoodputElastic().allocate(jobs, gpus, 30.0)[j.job_id]
            }


def test_the_fairness_exponent_chooses_between_fair_and_fast() -> None:
    # a job that scales and one that barely does share 6 spare GPUs (each admitted on 1)
    jobs = [ElasticJob("fast", 1, 8, 1, speedup=LINEAR), ElasticJob("flat", 1, 8, 1, speedup=FLAT)]
    total = SearchElastic(p=1.0).allocate(jobs, 8, 30.0)
    assert total == {"fast": 7, "flat": 1}  # the sum of speedups: every GPU where it runs
    for p in (-1.0, 0.0):  # harmonic and geometric means: the flat job gets some too
        got = SearchElastic(p=p).allocate(jobs, 8, 30.0)
        assert got["flat"] > 1 and got["fast"] < 7 and sum(got.values()) == 8


def test_the_price_picks_each_rows_first_cheapest_count_from_its_cells() -> None:
    # the price reads only the finite cells (and column 0): it picks what a plain argmin over
    # the whole table picks, at any price, ties, inf, NaN and a row of inf included
    rng = np.random.default_rng(5)
    for _ in range(300):
        jobs, width = int(rng.integers(1, 40)), int(rng.integers(1, 9))
        cost = np.round(rng.random((jobs, width)), 1)  # rounded: ties
        caps = np.minimum(rng.integers(0, width, jobs), rng.integers(0, 3, jobs))
        cost[np.arange(width)[None, :] > caps[:, None]] = np.inf
        cost[rng.random((jobs, width)) < 0.05] = np.inf  # column 0 too
        cost[rng.random((jobs, width)) < 0.02] = np.nan  # not finite: as inf
        finite = np.where(np.isfinite(cost), cost, np.inf)
        counts = np.arange(width, dtype=np.float64)
        table = _Cells.of(cost)
        for price in (0.0, float(rng.random()), 0.1, 2.0, np.inf):
            with np.errstate(invalid="ignore"):
                want = np.argmin(finite + price * counts[None, :], axis=1)
                got = table.col[table.pick(price)]
            assert np.array_equal(got, want)
        with np.errstate(invalid="ignore"):
            drop = float(np.max(finite[:, 0] - np.min(finite, axis=1)))
            assert table.spread() == pytest.approx(drop, nan_ok=True)


def test_the_served_weight_gives_spare_gpus_to_the_jobs_that_ran_least() -> None:
    # two queued jobs on the same curve share 6 spare GPUs (each admitted on 1)
    young = ElasticJob("young", 1, 8, 1, speedup=LINEAR, served=0.0)
    old = ElasticJob("old", 1, 8, 1, speedup=LINEAR, served=100 * 3600.0)
    for exact in (EXACT_CELLS_DEFAULT, 0):
        # no weight: the served GPU-seconds are not read, the split is even
        plain = SearchElastic(exact_cells=exact, served_scale_s=0.0)
        assert not plain.reads_served
        assert plain.allocate([old, young], 8, 30.0) == {"old": 4, "young": 4}
        weighted = SearchElastic(exact_cells=exact)  # the default: 4 GPU-hours
        assert weighted.reads_served
        got = weighted.allocate([old, young], 8, 30.0)
        assert got["young"] > got["old"] >= 1 and sum(got.values()) == 8
        # equal service, equal weight: even again
        same = replace(old, served=0.0)
        assert weighted.allocate([same, young], 8, 30.0) == {"old": 4, "young": 4}
    with pytest.raises(ValueError, match="served_scale_s must be >= 0"):
        SearchElastic(served_scale_s=-1.0)
