"""The SDK (`orchestrator.client.Client`) against the real server."""

from __future__ import annotations

import re
import threading
import time
from typing import Any

import pytest

from orchestrator.api.server import ApiServer
from orchestrator.client import Client
from orchestrator.errors import ApiError
from orchestrator.store import JobStore
from orchestrator.store.states import JobState
from tests.api.conftest import job_spec, spec_data


@pytest.fixture
def member(api: ApiServer, tokens: dict[str, str]) -> Client:
    return Client(api.url, tokens["member"])


def test_submit_list_show_cancel_wait(member: Client, store: JobStore) -> None:
    one = member.submit(job_spec())
    two, three = member.submit_many([spec_data(name="b"), job_spec(name="c")])
    assert [j.id for j in member.list()] == [one, two, three]
    assert [j.id for j in member.list(limit=1)] == [three]
    assert member.list(job_class="bulk") == []
    detail = member.show(one)
    assert detail.job.state is JobState.QUEUED and detail.job.spec["team"] == "vision"
    assert member.cancel(one).state is JobState.CANCELLED
    (done,) = member.wait([one], timeout_s=5)
    assert done.state is JobState.CANCELLED
    assert [j.id for j in member.list(states=["queued"])] == [two, three]
    assert member.whoami().name == "member"


def test_wait_gives_up_at_its_timeout(member: Client) -> None:
    job_id = member.submit(job_spec())
    (job,) = member.wait([job_id], timeout_s=0.2, poll_s=0.05)
    assert job.state is JobState.QUEUED


def test_follow_streams_state_changes_until_the_job_ends(member: Client) -> None:
    job_id = member.submit(job_spec())
    seen: list[dict[str, Any]] = []
    follower = threading.Thread(target=lambda: seen.extend(member.follow(job_id)))
    follower.start()
    member.cancel(job_id)
    follower.join(15)
    assert not follower.is_alive()
    assert [e["event"] for e in seen] == ["submitted", "queued", "cancelled"]
    assert seen[-1]["message"] == "cancelled by member"


def test_errors_carry_status_and_problems(member: Client, api: ApiServer) -> None:
    with pytest.raises(ApiError) as refused:
        member.submit(job_spec("speech"))
    assert refused.value.status == 403 and refused.value.exit_code == 2
    with pytest.raises(ApiError) as invalid:
        member.submit({**spec_data(), "sla": {"latency": {"max_ms": -1}}})
    assert invalid.value.status == 422
    assert any(p.startswith("sla.latency.max_ms:") for p in invalid.value.problems)
    with pytest.raises(ApiError) as missing:
        member.show("no-such-job")
    assert missing.value.status == 404 and "no job matches" in str(missing.value)
    with pytest.raises(ApiError) as unauthenticated:
        Client(api.url, "orch_deadbeef_nope").list()
    assert unauthenticated.value.status == 401
    with pytest.raises(ApiError) as down:
        Client("http://127.0.0.1:1", "orch_x_y").list()
    assert down.value.status is None and down.value.exit_code == 1


def test_pool_and_teams(api: ApiServer, tokens: dict[str, str], store: JobStore) -> None:
    admin = Client(api.url, tokens["admin"])
    with pytest.raises(ApiError) as none:
        admin.pool()
    assert none.value.status == 404
    store.pool_view.publish({"nodes": [{"node_id": "n1", "gpus": 2}]}, 60_000)
    assert admin.pool()["nodes"][0]["gpus"] == 2
    applied = admin.apply_teams({"teams": [{"name": "vision", "guaranteed_gpus": 2}]})
    assert admin.teams() == applied
    with pytest.raises(ApiError) as too_big:  # more than the pool's 2 GPUs
        admin.apply_teams({"teams": [{"name": "vision", "guaranteed_gpus": 3}]})
    assert too_big.value.status == 422


def test_strict_refuses_a_deadline_the_published_plan_declines(
    member: Client, store: JobStore
) -> None:
    # issue 26: a hand-made plan of a 4-GPU pool, all of it taken for the next 1,000 s; the
    # job's 8,000 samples at its tuned 8 samples/s on 4 GPUs are 1,000 s: done at 1,000 + 30 +
    # 1.1 x 1,000 = 2,130 s at the earliest, past its 2,000 s
    now = time.time()
    plan = {"steps": [[now - 1.0, 0], [now + 1000.0, 4]], "restart_cost_s": 30.0}
    store.pool_view.publish({"nodes": [], "plan": {**plan, "margin_frac": 0.1}}, 60_000)
    store.profiles.save("due", {"chosen": {"by_gpus": [{"gpus": 4, "samples_per_s": 8.0}]}})
    spec = {
        **spec_data(name="due"),
        "class": "bulk",
        "resources": {"gpus": 4},
        "sla": {"throughput": {"work_samples": 8000, "deadline_s": 2000}},
        "run": {"micro_batch": 8},
    }
    with pytest.raises(ApiError) as refused:
        member.submit(spec, strict=True)
    assert refused.value.status == 422 and refused.value.exit_code == 2
    (problem,) = refused.value.problems
    assert "deadline_s 2000 s cannot be met" in problem, problem
    done = re.search(r"done is ([\d,]+) s after submission \(on 4 GPUs\)", problem)
    assert done is not None and float(done[1].replace(",", "")) == pytest.approx(2130, abs=5)
    assert member.list() == []
    # a later deadline fits the same plan; without --strict the declined one is queued too
    member.submit({**spec, "sla": {"throughput": {"work_samples": 8000, "deadline_s": 2200}}})
    member.submit(spec)
    assert len(member.list()) == 2
