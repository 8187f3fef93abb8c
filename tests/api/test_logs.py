"""A job's captured output through the store, the API (team-scoped like show), the SDK and
`orch logs` in both modes. The lines are written the way workers write them: through
``LogSink``, one per rank."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from orchestrator.api.server import ApiServer
from orchestrator.client import Client
from orchestrator.errors import ApiError
from orchestrator.store import JobStore, LogSink
from orchestrator.store.logs import LOG_MAXLEN
from tests.api.conftest import http, job_spec
from tests.api.test_cli_api_mode import as_token, orch


@pytest.fixture
def job_id(store: JobStore, redis_url: str) -> str:
    """A vision job whose two ranks wrote a few lines each."""
    (job,) = store.submit_many([job_spec()])
    rank0, rank1 = (LogSink(redis_url, store.namespace, job, r) for r in (0, 1))
    rank0([("out", "step 1 loss 0.5"), ("err", "UserWarning: careful")])
    time.sleep(0.01)  # ranks are ordered by time only to the millisecond
    rank1([("out", "rank one here")])
    time.sleep(0.01)
    rank0([("out", "step 2 loss 0.25")])
    rank0.close()
    rank1.close()
    return job


def test_the_store_keeps_each_rank_apart_and_merges_them_in_order(
    store: JobStore, job_id: str
) -> None:
    lines = store.logs.tail(job_id)
    assert [(e.rank, e.stream, e.line) for e in lines] == [
        (0, "out", "step 1 loss 0.5"),
        (0, "err", "UserWarning: careful"),
        (1, "out", "rank one here"),
        (0, "out", "step 2 loss 0.25"),
    ]
    assert store.logs.ranks(job_id) == [0, 1]
    assert [e.line for e in store.logs.tail(job_id, rank=1)] == ["rank one here"]
    assert [e.line for e in store.logs.tail(job_id, rank=0, count=1)] == ["step 2 loss 0.25"]
    assert store.logs.delete(job_id) == 3 and store.logs.tail(job_id) == []


def test_a_ranks_stream_is_capped(store: JobStore) -> None:
    (job,) = store.submit_many([job_spec()])
    for start in range(0, 3 * LOG_MAXLEN, 500):
        store.logs.append(job, 0, [("out", f"line {i}") for i in range(start, start + 500)])
    kept = store.logs.tail(job)
    assert LOG_MAXLEN <= len(kept) < LOG_MAXLEN + 500
    assert kept[-1].line == f"line {3 * LOG_MAXLEN - 1}"


def test_logs_are_read_as_a_job_is_shown(
    api: ApiServer, tokens: dict[str, str], job_id: str
) -> None:
    for who in ("admin", "member", "viewer", "viewer-all"):
        with http(api, tokens[who]) as client:
            reply = client.get(f"/v1/jobs/{job_id}/logs", params={"rank": 0, "tail": 2})
            assert reply.status_code == 200, (who, reply.text)
            assert [e["line"] for e in reply.json()] == [
                "UserWarning: careful",
                "step 2 loss 0.25",
            ]
    with http(api, tokens["outsider"]) as client:
        assert client.get(f"/v1/jobs/{job_id}/logs").status_code == 404
        assert client.get(f"/v1/jobs/{job_id}/logs/stream").status_code == 404
    with http(api) as client:
        assert client.get(f"/v1/jobs/{job_id}/logs").status_code == 401
    with http(api, tokens["admin"]) as client:
        assert client.get("/v1/jobs/no-such-job/logs").status_code == 404
        assert client.get(f"/v1/jobs/{job_id}/logs", params={"rank": -1}).status_code == 422


def test_the_sdk_follows_until_the_job_ends(
    api: ApiServer, tokens: dict[str, str], store: JobStore, redis_url: str, job_id: str
) -> None:
    member = Client(api.url, tokens["member"])
    assert [e.line for e in member.logs(job_id, rank=1)] == ["rank one here"]

    def later() -> None:
        time.sleep(0.5)
        sink = LogSink(redis_url, store.namespace, job_id, 2)  # a rank that starts late
        sink([("out", "late rank"), ("err", "Traceback (most recent call last):")])
        sink.close()
        time.sleep(0.3)
        store.cancel(job_id)

    writer = threading.Thread(target=later)
    writer.start()
    started = time.monotonic()
    followed = list(member.logs(job_id, tail=1, follow=True))
    writer.join()
    assert [(e.rank, e.line) for e in followed] == [
        (1, "rank one here"),
        (0, "step 2 loss 0.25"),
        (2, "late rank"),
        (2, "Traceback (most recent call last):"),
    ]
    assert time.monotonic() - started < 15
    with pytest.raises(ApiError) as refused:
        list(Client(api.url, tokens["outsider"]).logs(job_id, follow=True))
    assert refused.value.status == 404


def test_orch_logs_directly_and_through_the_api(
    api: ApiServer,
    tokens: dict[str, str],
    store: JobStore,
    redis_url: str,
    job_id: str,
    tmp_path: Path,
) -> None:
    direct = {
        "REDIS_URL": redis_url,
        "ORCH_NAMESPACE": store.namespace,
        "ORCH_DATA_DIR": str(tmp_path),
    }
    store.cancel(job_id)  # ended: -f prints what is kept and returns
    for env in (direct, as_token(api, tokens["member"])):
        every = orch("logs", job_id, env=env)
        assert every.returncode == 0, every.stderr
        assert every.stdout.splitlines() == [
            "[rank 0] step 1 loss 0.5",
            "[rank 1] rank one here",
            "[rank 0] step 2 loss 0.25",
        ]
        assert every.stderr.splitlines() == ["[rank 0] UserWarning: careful"]
        one = orch("logs", job_id, "--rank", "1", "-f", env=env)
        assert one.returncode == 0 and one.stdout == "rank one here\n", one.stderr
    refused = orch("logs", job_id, env=as_token(api, tokens["outsider"]))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
