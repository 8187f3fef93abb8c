"""Open-loop arrival streams: a seeded Poisson stream, a trace parsed line by line, a trace
repeated over a duration, each bounded in length (pure: no clock, no torch)."""

from __future__ import annotations

import pytest

from workers.arrivals import parse_trace, poisson_arrivals, repeat_trace
from workers.errors import HarnessConfigError


def test_poisson_arrivals_are_seeded_and_at_the_rate() -> None:
    a = poisson_arrivals(200.0, 50.0, seed=3)
    assert a == poisson_arrivals(200.0, 50.0, seed=3) != poisson_arrivals(200.0, 50.0, seed=4)
    assert len(a) == pytest.approx(10_000, rel=0.05) and a == sorted(a) and a[-1] < 50.0
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(HarnessConfigError, match="rate_rps"):
            poisson_arrivals(bad, 1.0)
    with pytest.raises(HarnessConfigError, match="at most"):
        poisson_arrivals(1e6, 1e6)
    with pytest.raises(HarnessConfigError, match="at most 1,000 in one run"):
        poisson_arrivals(100.0, 11.0, limit=1_000)


def test_a_trace_parses_or_names_its_bad_line() -> None:
    assert parse_trace("# times\n1.5\n\n2.0  # two\n2.0\n") == [0.0, 0.5, 0.5]
    with pytest.raises(HarnessConfigError, match="line 2: expected an arrival time"):
        parse_trace("0\nsoon\n")
    with pytest.raises(HarnessConfigError, match="line 3: arrival times must not decrease"):
        parse_trace("0\n2\n1\n")
    with pytest.raises(HarnessConfigError, match="line 1: time must be >= 0"):
        parse_trace("-1\n")
    with pytest.raises(HarnessConfigError, match="line 1: time must be >= 0"):
        parse_trace("nan\n")
    with pytest.raises(HarnessConfigError, match="no arrival"):
        parse_trace("# nothing\n")


def test_a_trace_may_hold_several_times_on_a_line() -> None:
    assert parse_trace("1 1.25\t1.5\n\n2  2.5 # end\n") == [0.0, 0.25, 0.5, 1.0, 1.5]
    with pytest.raises(HarnessConfigError, match="line 2: arrival times must not decrease"):
        parse_trace("0 1\n3 2\n")
    with pytest.raises(HarnessConfigError, match="more than 3 arrivals"):
        parse_trace("0 1 2\n3\n", limit=3)


def test_a_repeated_trace_covers_the_duration_and_is_bounded() -> None:
    assert repeat_trace([0.0, 0.25, 0.5], 1.2) == pytest.approx(
        [0.0, 0.25, 0.5, 0.5, 0.75, 1.0, 1.0]
    )
    assert repeat_trace([0.0, 1.0, 2.0], 1.5) == [0.0, 1.0]  # longer than it: cut
    with pytest.raises(HarnessConfigError, match="more than 100 arrivals"):
        repeat_trace([0.0, 0.01], 10.0, limit=100)
