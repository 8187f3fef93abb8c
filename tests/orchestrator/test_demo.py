"""The demo's own namespace."""

from __future__ import annotations

from orchestrator.cli.demo import demo_namespace


def test_the_demo_never_clears_a_real_namespace() -> None:
    assert demo_namespace("orch") == "demo"
    assert demo_namespace("prod") == "prod-demo"
