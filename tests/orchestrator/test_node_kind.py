"""A node's GPU kind and speed from its Ray resources and NVML models
(``orchestrator.kinds.node_kind``), and what is wrong with an operator's declaration."""

from __future__ import annotations

import math

import pytest

from orchestrator.kinds import Kind, model_kind, node_kind


def test_the_kind_comes_from_the_declaration_then_nvml_then_ray_then_virtual() -> None:
    declared = {"GPU": 2, "orch_gpu_kind:L4": 2, "orch_gpu_speed_pct": 40}
    assert node_kind(declared, ["NVIDIA H100 80GB HBM3"]) == Kind("L4", 0.4)
    assert node_kind({"GPU": 8}, ["NVIDIA H100 80GB HBM3"]) == Kind("H100", 3.17)
    assert node_kind({"GPU": 1, "accelerator_type:A10G": 1}, []) == Kind("A10G", 0.4)
    assert node_kind({"GPU": 4}, []) == Kind("virtual", 1.0)
    # several models on one node: the slowest, which a gang can count on
    assert node_kind({}, ["NVIDIA A100-SXM4-80GB", "Tesla T4"]).name == "T4"
    assert model_kind("NVIDIA RTX 6000 Ada Generation") == "RTX-6000-Ada-Generation"


@pytest.mark.parametrize("name", ["H 100", "", "$(id)", "[red]bold[/red]", "x" * 65, "H100\n"])
def test_a_declared_name_that_is_no_kind_name_is_ignored_and_told(name: str) -> None:
    kind = node_kind({"GPU": 2, f"orch_gpu_kind:{name}": 2}, [])
    assert kind.name == "virtual" and kind.speed == 1.0
    (problem,) = kind.problems
    assert f"declares the kind {name!r}, which is not a kind name" in problem


def test_two_declared_kinds_take_the_first_and_say_so() -> None:
    kind = node_kind({"orch_gpu_kind:L4": 1, "orch_gpu_kind:A10": 1}, [])
    assert kind.name == "A10"
    assert kind.problems == ("declares the kinds A10, L4: A10 taken",)


@pytest.mark.parametrize("pct", [0, -40, math.nan, math.inf, 1e14])
def test_a_declared_speed_out_of_range_falls_back_to_the_kinds_own(pct: float) -> None:
    kind = node_kind({"orch_gpu_kind:L4": 1, "orch_gpu_speed_pct": pct}, [])
    assert kind.speed == 0.39  # the catalogue's L4
    (problem,) = kind.problems
    assert "orch_gpu_speed_pct" in problem and "the kind's own speed taken" in problem


def test_a_declaration_in_range_has_no_problem() -> None:
    kind = node_kind({"orch_gpu_kind:L4": 1, "orch_gpu_speed_pct": 1e8}, [])
    assert kind == Kind("L4", 1e6)
