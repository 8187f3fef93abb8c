"""The `orch` executable in API mode (ORCH_API_URL + ORCH_TOKEN) against the real server: an
admin bootstraps tokens directly, a member submits, lists, shows and cancels through the API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.api.server import ApiServer
from orchestrator.store import JobStore
from tests.api.conftest import http, spec_data


def orch(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "orch"
    clean = {k: v for k, v in os.environ.items() if k not in ("ORCH_API_URL", "ORCH_TOKEN")}
    return subprocess.run(
        [str(exe), *args], env={**clean, **env}, capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def direct(redis_url: str, namespace: str, tmp_path: Path) -> dict[str, str]:
    """The environment of an admin on the store's machine (direct Redis access)."""
    return {"REDIS_URL": redis_url, "ORCH_NAMESPACE": namespace, "ORCH_DATA_DIR": str(tmp_path)}


def as_token(api: ApiServer, token: str) -> dict[str, str]:
    """The environment of a user with only the API's URL and a token (no Redis)."""
    return {"ORCH_API_URL": api.url, "ORCH_TOKEN": token, "REDIS_URL": "redis://127.0.0.1:1/0"}


@pytest.fixture
def vision_job(tmp_path: Path) -> Path:
    path = tmp_path / "vision.json"
    path.write_text(json.dumps(spec_data("vision", "vision-eval")))
    return path


def test_admin_bootstraps_a_member_who_submits_lists_shows_and_cancels(
    api: ApiServer, store: JobStore, direct: dict[str, str], vision_job: Path
) -> None:
    made = orch(
        "tokens", "create", "--role", "member", "--team", "vision", "--name", "alice", env=direct
    )
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert token.startswith("orch_") and "shown once" in made.stderr
    alice = as_token(api, token)

    submitted = orch("submit", str(vision_job), env=alice)
    assert submitted.returncode == 0, submitted.stderr
    (rec,) = store.list()
    assert rec.id in submitted.stdout and rec.by == "alice"

    listed = orch("list", "-o", "json", env=alice)
    assert listed.returncode == 0, listed.stderr
    (job,) = json.loads(listed.stdout)
    assert job["id"] == rec.id and job["class"] == "interactive" and job["state"] == "queued"
    assert job["verdict"]["target"] == "p95 <= 100 ms"

    shown = orch("show", "vision-eval", env=alice)
    assert shown.returncode == 0 and rec.id in shown.stdout and "p95 <= 100 ms" in shown.stdout
    detail = json.loads(orch("show", rec.id, "-o", "json", env=alice).stdout)
    assert [e["event"] for e in detail["events"]] == ["submitted", "queued"]

    cancelled = orch("cancel", rec.id, "--by", "mallory", env=alice)
    assert cancelled.returncode == 0 and f"{rec.id}: cancelled" in cancelled.stdout
    assert store.get(rec.id).message == "cancelled by alice"  # --by is the token's principal

    again = orch("cancel", rec.id, env=alice)
    assert again.returncode == 2 and "already cancelled" in again.stderr
    assert "Traceback" not in again.stderr

    audit = orch("audit", "-o", "json", env=direct)
    actions = [(e["actor"], e["action"]) for e in json.loads(audit.stdout)]
    assert ("alice", "submit") in actions and ("alice", "cancel") in actions


def test_refusals_are_one_line_and_exit_2(
    api: ApiServer, store: JobStore, tokens: dict[str, str], direct: dict[str, str], tmp_path: Path
) -> None:
    speech = tmp_path / "speech.json"
    speech.write_text(json.dumps(spec_data("speech")))
    member = as_token(api, tokens["member"])
    refused = orch("submit", str(speech), env=member)
    assert refused.returncode == 2
    assert "HTTP 403" in refused.stderr and "team 'speech'" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert store.list() == []

    assert orch("tokens", "list", env=member).returncode == 2
    assert orch("teams", "show", env=member).returncode == 2  # none applied: 404
    bad = orch("list", env=as_token(api, "orch_00000000_nope"))
    assert bad.returncode == 2 and "HTTP 401" in bad.stderr


def test_admin_commands_through_the_api(
    api: ApiServer, store: JobStore, tokens: dict[str, str], tmp_path: Path
) -> None:
    admin = as_token(api, tokens["admin"])
    teams = tmp_path / "teams.yaml"
    teams.write_text("teams: [{name: vision, guaranteed_gpus: 1}]\n")
    assert orch("teams", "apply", str(teams), env=admin).returncode == 0
    shown = json.loads(orch("teams", "show", "-o", "json", env=admin).stdout)
    assert shown["teams"][0]["name"] == "vision"
    made = orch("tokens", "create", "--role", "viewer", "--name", "bob", env=admin)
    assert made.returncode == 0, made.stderr
    listed = json.loads(orch("tokens", "list", "-o", "json", env=admin).stdout)
    bob = next(t for t in listed if t["name"] == "bob")
    assert "sha256" not in bob and made.stdout.strip() not in json.dumps(listed)
    assert orch("tokens", "revoke", bob["id"], env=admin).returncode == 0
    assert orch("list", env=as_token(api, made.stdout.strip())).returncode == 2


def test_api_mode_needs_both_variables_and_a_reachable_server(direct: dict[str, str]) -> None:
    half = orch("list", env={**direct, "ORCH_TOKEN": "orch_x_y"})
    assert half.returncode == 2 and "ORCH_API_URL" in half.stderr
    down = orch("list", env={"ORCH_API_URL": "http://127.0.0.1:1", "ORCH_TOKEN": "orch_x_y"})
    assert down.returncode == 1 and "cannot reach" in down.stderr
    assert "Traceback" not in down.stderr


def test_version_and_direct_json(direct: dict[str, str], store: JobStore, vision_job: Path) -> None:
    assert orch("--version", env=direct).stdout.startswith("orch ")
    assert orch("submit", str(vision_job), env=direct).returncode == 0
    (job,) = json.loads(orch("list", "-o", "json", "--team", "vision", env=direct).stdout)
    assert job["team"] == "vision"
    assert json.loads(orch("list", "-o", "json", "--class", "bulk", env=direct).stdout) == []
    (entry,) = json.loads(orch("audit", "-o", "json", env=direct).stdout)
    assert entry["action"] == "submit" and entry["actor"].endswith("@local")


def test_steps_within_the_warm_up_are_refused_as_directly(
    api: ApiServer, store: JobStore, tokens: dict[str, str], tmp_path: Path
) -> None:
    """The API refuses the job the CLI refuses directly (tests/orchestrator/test_cli.py), in
    the same words: one line naming both fields, exit 2, nothing written."""
    from tests.orchestrator.test_cli import SHORT_JOB, SHORT_PROBLEM

    job = tmp_path / "short.yaml"
    job.write_text(SHORT_JOB)
    out = orch("submit", str(job), env=as_token(api, tokens["member"]))
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    assert [line for line in out.stderr.splitlines() if "run.steps" in line] == [
        f"  - {SHORT_PROBLEM}"
    ]
    assert store.list() == []


def test_show_through_the_api_never_prints_a_traceback_for_an_odd_job(
    api: ApiServer, store: JobStore, tokens: dict[str, str]
) -> None:
    from tests.orchestrator.test_cli import odd_jobs

    for job_id in odd_jobs(store):
        out = orch("show", job_id, env=as_token(api, tokens["admin"]))
        assert out.returncode == 0, out.stderr
        assert "Traceback" not in out.stdout + out.stderr and job_id in out.stdout


def _deadline_job(path: Path, name: str) -> Path:
    """A vision bulk job of 100,000 samples due in 1,000 s, as a file."""
    spec = {
        "name": name,
        "team": "vision",
        "class": "bulk",
        "workload": "cnn",
        "resources": {"gpus": 4},
        "sla": {"throughput": {"work_samples": 100_000, "deadline_s": 1000.0}},
    }
    path.write_text(json.dumps(spec))
    return path


def test_submit_warns_the_same_directly_and_through_the_api(
    api: ApiServer, store: JobStore, tokens: dict[str, str], direct: dict[str, str], tmp_path: Path
) -> None:
    """The deadline warnings are built where the jobs are queued (operations.submit), so
    `orch submit` prints the same ones, and the same `-o json`, in either mode; a single
    `POST /v1/jobs` (written with the concurrent ones) answers its own."""
    store.profiles.save("tuned", {"chosen": {"samples_per_s": 80.0}})  # 1,250 s: too slow
    files = [_deadline_job(tmp_path / f"{n}.json", n) for n in ("tuned", "untuned")]
    expected = [
        "job 'tuned': sla.throughput.deadline_s 1000 s cannot be met: 100000 samples at the "
        "tuned 80.0 samples/s on up to 4 GPUs take 1,250 s",
        "job 'untuned': deadline not checked: no tuned rate yet (`orch tune` the job file first)",
    ]
    for env in (direct, as_token(api, tokens["member"])):
        out = orch("submit", *map(str, files), "-o", "json", env=env)
        assert out.returncode == 0, out.stderr
        reply = json.loads(out.stdout)
        assert len(reply["ids"]) == 2 and reply["warnings"] == expected
        warned = [line for line in out.stderr.splitlines() if "no scheduler" not in line]
        assert warned == [f"warning: {m}" for m in expected], out.stderr
    assert len(store.list()) == 4
    with http(api, tokens["member"]) as client:
        single = client.post("/v1/jobs", json=json.loads(files[0].read_text()))
    assert single.status_code == 201 and single.json()["warnings"] == expected[:1]


def test_a_member_makes_a_token_for_a_services_clients_that_reaches_it_and_nothing_else(
    api: ApiServer, store: JobStore, direct: dict[str, str]
) -> None:
    """`orch tokens create --service JOB` through the API (as the refusal of `--role service`
    says to): a member of the service's team may; the token reads its service's endpoint and
    is refused everywhere else; a member of another team may not make one."""
    from orchestrator.spec import parse_spec

    service = parse_spec(
        {
            **spec_data("vision", "scorer"),
            "workload": {"name": "infer", "args": {"model": "mlp"}},
            "run": {"micro_batch": 8, "duration_s": 60},
            "serve": {"rate_rps": 10},
        }
    )
    job_id = store.submit(service).id
    member = orch("tokens", "create", "--role", "member", "--team", "vision", env=direct)
    outsider = orch("tokens", "create", "--role", "member", "--team", "nlp", env=direct)
    alice, mallory = as_token(api, member.stdout.strip()), as_token(api, outsider.stdout.strip())
    made = orch("tokens", "create", "--service", "scorer", "--name", "web", env=alice)
    assert made.returncode == 0, made.stderr
    assert f"the clients of service {job_id}" in made.stderr
    token = made.stdout.strip()
    with http(api, token) as c:
        seen = c.get(f"/v1/services/{job_id}")
        assert seen.status_code == 200 and seen.json()["job_id"] == job_id
        assert c.get("/v1/jobs").status_code == 403  # its endpoint and nothing else
    refused = orch("tokens", "create", "--service", job_id, env=mallory)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
    # a role with --service, or a service token by --role, is refused naming the option
    both = orch("tokens", "create", "--service", job_id, "--role", "admin", env=alice)
    assert both.returncode == 2 and "--service takes no --role or --team" in both.stderr
    asked = orch("tokens", "create", "--role", "service", env=direct)
    assert asked.returncode == 2 and "orch tokens create --service JOB" in asked.stderr
