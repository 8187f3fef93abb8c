"""Contract tests every placement policy runs (as Optuna's shared storage tests)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies import PLACEMENTS, PackPlacement, Placement, SpreadPlacement, UnknownPolicyError
from policies.placement import FreeIndex, MostFreePlacement, TopologyPlacement
from policies.placement.base import best_fit

free_maps = st.lists(st.integers(min_value=0, max_value=8), min_size=1, max_size=6).map(
    lambda xs: {f"node{i}": x for i, x in enumerate(xs)}
)


class PlacementContract:
    """Shared contract: whole gang or nothing, never beyond a node's free GPUs, deterministic.

    Hypothesis runs the same inherited test on each subclass: that is intended here.
    """

    placement: Placement

    @settings(suppress_health_check=[HealthCheck.differing_executors])
    @given(free=free_maps, gpus=st.integers(min_value=1, max_value=20))
    def test_gang_fits_within_free(self, free: dict[str, int], gpus: int) -> None:
        nodes = self.placement.place(gpus, free)
        if sum(free.values()) < gpus:
            assert nodes is None
            return
        assert nodes is not None
        assert len(nodes) == gpus
        for node, used in Counter(nodes).items():
            assert used <= free[node]

    @settings(suppress_health_check=[HealthCheck.differing_executors])
    @given(free=free_maps, gpus=st.integers(min_value=1, max_value=20))
    def test_deterministic(self, free: dict[str, int], gpus: int) -> None:
        assert self.placement.place(gpus, free) == self.placement.place(gpus, dict(free))

    def test_zero_free_does_not_fit(self) -> None:
        assert self.placement.place(1, {"a": 0, "b": 0}) is None


class TestPack(PlacementContract):
    placement = PackPlacement()

    @given(free=free_maps, gpus=st.integers(min_value=1, max_value=8))
    def test_single_node_when_one_fits(self, free: dict[str, int], gpus: int) -> None:
        nodes = self.placement.place(gpus, free)
        if any(f >= gpus for f in free.values()):
            assert nodes is not None and len(set(nodes)) == 1

    def test_best_fit(self) -> None:
        # The tightest node is used, keeping the 8-GPU hole for a large gang.
        assert self.placement.place(2, {"big": 8, "small": 2, "mid": 4}) == ("small", "small")

    def test_spans_fewest_nodes(self) -> None:
        nodes = self.placement.place(5, {"a": 1, "b": 3, "c": 2})
        assert nodes is not None and sorted(set(nodes)) == ["b", "c"]


class TestSpread(PlacementContract):
    placement = SpreadPlacement()

    def test_one_per_node_when_possible(self) -> None:
        assert self.placement.place(3, {"a": 4, "b": 4, "c": 4}) == ("a", "b", "c")


class TestMostFree(PlacementContract):
    placement = MostFreePlacement()

    def test_takes_from_the_most_free_node_first(self) -> None:
        assert self.placement.place(5, {"a": 2, "b": 4, "c": 3}) == ("b",) * 4 + ("c",)


class TestTopology(PlacementContract):
    placement = TopologyPlacement()

    @given(free=free_maps, gpus=st.integers(min_value=1, max_value=20))
    def test_fewest_nodes(self, free: dict[str, int], gpus: int) -> None:
        nodes = self.placement.place(gpus, free)
        if nodes is None:
            return
        fewest, covered = 0, 0
        for f in sorted(free.values(), reverse=True):
            if covered >= gpus:
                break
            covered += f
            fewest += 1
        assert len(set(nodes)) == fewest

    def test_remainder_fits_tightly(self) -> None:
        # 4 on the big node, the remaining 1 on the 1-free node, not on the 3-free node
        nodes = self.placement.place(5, {"a": 4, "b": 3, "c": 1})
        assert nodes is not None and sorted(set(nodes)) == ["a", "c"]


def test_registry_selects_by_name() -> None:
    assert isinstance(PLACEMENTS.create("pack"), PackPlacement)
    assert isinstance(PLACEMENTS.create("spread"), SpreadPlacement)


def test_registry_unknown_name_lists_valid() -> None:
    with pytest.raises(
        UnknownPolicyError,
        match=r"unknown placement policy .packed.; valid: most-free, pack, spread, topology",
    ):
        PLACEMENTS.create("packed")


def test_a_policy_is_named_as_users_type_it_through_its_wrappers() -> None:
    from policies import SCHEDULING_POLICIES
    from policies.scheduling import TeamCaps

    for name in SCHEDULING_POLICIES.names():
        policy = SCHEDULING_POLICIES.create(name)
        assert SCHEDULING_POLICIES.name_of(TeamCaps(policy)) == name
    assert PLACEMENTS.name_of(PackPlacement()) == "pack"
    assert PLACEMENTS.name_of(object()) == "object"  # not registered: its class


@settings(max_examples=200)
@given(
    free=st.lists(st.integers(min_value=-1, max_value=8), min_size=1, max_size=12).map(
        lambda xs: {f"node{i}": x for i, x in enumerate(xs)}
    ),
    steps=st.lists(
        st.tuples(st.integers(min_value=0, max_value=11), st.integers(min_value=-1, max_value=9)),
        max_size=40,
    ),
)
def test_free_index_places_as_the_plain_dict(
    free: dict[str, int], steps: list[tuple[int, int]]
) -> None:
    """A FreeIndex changed node by node answers every placement as the plain dict would, before
    and after its index is built (it scans the first ``SCANS`` calls)."""
    plain, index = dict(free), FreeIndex(free)
    placement = TopologyPlacement()
    nodes = list(free)
    for i, count in steps:
        node = nodes[i % len(nodes)]
        plain[node] = index[node] = count
        assert index == plain
        for gpus in range(1, 10):
            assert best_fit(gpus, index) == best_fit(gpus, dict(plain))
            assert placement.place(gpus, index) == placement.place(gpus, dict(plain))
