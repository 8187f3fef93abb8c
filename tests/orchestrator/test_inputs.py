"""The input loader's limits leave room for every real file (the refusals: test_bad_inputs)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from orchestrator.errors import SpecError
from orchestrator.inputs import MAX_DEPTH, parse_json, parse_yaml, read_text
from orchestrator.teams import MAX_TEAMS, load_teams


def test_the_largest_team_config_allowed_loads_quickly(tmp_path: Path) -> None:
    path = tmp_path / "teams.yaml"
    rows = [
        f"  - {{name: team-{i}, weight: 1.5, guaranteed_gpus: 1, max_gpus: 8}}\n"
        for i in range(MAX_TEAMS)
    ]
    path.write_text("allow_unlisted: false\nteams:\n" + "".join(rows))
    started = time.perf_counter()
    assert len(load_teams(path).teams) == MAX_TEAMS
    assert time.perf_counter() - started < 10


def test_nesting_up_to_the_limit_is_accepted() -> None:
    deepest = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert parse_yaml(deepest) is not None and parse_json(deepest) is not None
    with pytest.raises(SpecError, match="nested more than"):
        parse_yaml("[" + deepest + "]")
    with pytest.raises(SpecError, match="nested more than"):
        parse_json("[" + deepest + "]")


def test_an_anchor_alone_is_harmless_and_accepted() -> None:
    assert parse_yaml("a: &x 1\nb: 2\n") == {"a": 1, "b": 2}
    with pytest.raises(SpecError, match=r"alias \*x is not allowed"):
        parse_yaml("a: &x 1\nb: *x\n")


def test_numbers_json_and_yaml_agree_on() -> None:
    doc = {"n": 2**62, "f": 1.5, "s": "x", "l": [1, {"k": None}]}
    assert parse_json(json.dumps(doc)) == doc
    assert parse_yaml(json.dumps(doc)) == doc  # JSON is YAML


def test_a_number_with_an_exponent_is_a_number_as_in_json() -> None:
    # PyYAML's YAML 1.1 reads these as strings; a job file's `speed: 1e7` must not be refused
    text = "a: 1e7\nb: 1.5e7\nc: -2E-3\nd: 1.0e+3\n"
    assert parse_yaml(text) == {"a": 1e7, "b": 1.5e7, "c": -2e-3, "d": 1e3}
    assert parse_yaml(text) == parse_json('{"a": 1e7, "b": 1.5e7, "c": -2E-3, "d": 1.0e+3}')
    # integers stay integers, quoted text stays text, and a bare "1e" is no number
    assert parse_yaml("n: 10\ng: 1_000\nq: '1e7'\nh: 1e\n") == {
        "n": 10,
        "g": 1000,
        "q": "1e7",
        "h": "1e",
    }


def test_a_file_of_exactly_the_limit_is_read(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_text("#" * 1000)
    assert read_text(path, max_bytes=1000) == "#" * 1000
    with pytest.raises(SpecError, match="larger than 999 bytes"):
        read_text(path, max_bytes=999)
