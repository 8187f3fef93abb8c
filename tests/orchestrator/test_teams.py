"""Team config: stored in Redis, checked at submission, shown per team."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.control.pool_view import team_usage
from orchestrator.errors import SpecError
from orchestrator.spec import JobSpec, parse_spec
from orchestrator.store import JobStore
from orchestrator.teams import TeamConfig, TeamSpec, load_teams, parse_teams
from policies.snapshot import TeamView


def _job(team: str, lo: int = 1, hi: int | None = None, name: str = "j") -> JobSpec:
    return parse_spec(
        {
            "name": name,
            "team": team,
            "class": "bulk",
            "workload": "mlp",
            "sla": {"throughput": {"min_samples_per_s": 1}},
            "resources": {"gpus": {"min": lo, "max": hi or lo}},
            "run": {"steps": 5, "micro_batch": 8},
        }
    )


CONFIG = parse_teams(
    {
        "allow_unlisted": False,
        "teams": [
            {"name": "vision", "weight": 2, "guaranteed_gpus": 2, "max_gpus": 3},
            {"name": "speech"},
        ],
    }
)


def test_config_round_trips_through_the_store(store: JobStore) -> None:
    assert store.teams() is None
    store.put_teams(CONFIG)
    assert store.teams() == CONFIG
    again = TeamConfig(teams=[TeamSpec(name="speech")])
    store.put_teams(again)
    assert store.teams() == again  # re-read when it changed


def test_jobs_the_config_refuses_write_nothing(store: JobStore) -> None:
    store.put_teams(CONFIG)
    ok = _job("vision", 1, 3)
    with pytest.raises(SpecError) as err:
        store.submit_many([ok, _job("nlp", name="n"), _job("vision", 4, name="big")])
    text = str(err.value)
    assert "job 'n': team: 'nlp' is not a configured team; allowed: vision, speech" in text
    assert "job 'big': resources.gpus.min: 4 is more than team 'vision' may hold" in text
    assert store.list() == []  # not even the acceptable one
    with pytest.raises(SpecError):
        store.submit(_job("vision", 4))
    assert store.list() == []
    assert store.submit(ok).team == "vision"


def test_unlisted_teams_allowed_by_default(store: JobStore) -> None:
    store.put_teams(parse_teams({"teams": [{"name": "vision", "max_gpus": 2}]}))
    assert store.submit(_job("anyone", 8)).team == "anyone"


def test_elastic_range_is_stored_as_the_sizes_that_keep_the_batch(store: JobStore) -> None:
    spec = parse_spec(
        {
            "name": "e",
            "team": "t",
            "class": "bulk",
            "workload": "mlp",
            "sla": {"throughput": {"min_samples_per_s": 1}},
            "resources": {"gpus": {"min": 1, "max": 5}},
            "run": {"steps": 5, "micro_batch": 4, "data_parallel": 2},  # 8 samples a step
        }
    )
    rec = store.submit(spec)
    (facts,) = store.queue_facts([rec.id])
    # asks for 2; may run on 1..4 (5 cannot split 8)
    assert (facts["gpus"], facts["gpus_min"], facts["gpus_max"]) == ("2", "1", "4")


def test_bad_team_file_names_each_field(tmp_path: Path) -> None:
    path = tmp_path / "teams.yaml"
    path.write_text("teams:\n  - {name: a, weight: 0, colour: red}\n  - {name: a}\n")
    with pytest.raises(SpecError) as err:
        load_teams(path)
    assert "teams.0.weight" in str(err.value) and "teams.0.colour" in str(err.value)
    path.write_text("teams:\n  - {name: a, guaranteed_gpus: 4, max_gpus: 2}\n  - {name: a}\n")
    with pytest.raises(SpecError, match="max_gpus \\(2\\) must be >= guaranteed_gpus"):
        load_teams(path)


def test_team_usage_shows_borrowing_against_guarantee_and_limit() -> None:
    teams = (TeamView("vision", 2.0, 2, 3), TeamView("speech", 1.0, 1, 0))
    rows = team_usage(teams, [("vision", 2), ("vision", 1), ("nlp", 2)], [("speech", 1)])
    by = {r["team"]: r for r in rows}
    assert [r["team"] for r in rows] == ["vision", "speech", "nlp"]
    assert (by["vision"]["used_gpus"], by["vision"]["borrowed_gpus"]) == (3, 1)
    assert (by["speech"]["used_gpus"], by["speech"]["queued_gpus"]) == (0, 1)
    assert by["nlp"]["configured"] is False and by["nlp"]["borrowed_gpus"] == 2
