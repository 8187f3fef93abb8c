"""Serving: `orch serve` as a user starts it, the docs page, and an address already taken."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from rich.console import Console

from orchestrator.api.server import ApiServer, parse_address, start
from orchestrator.config import Settings
from orchestrator.errors import ConfigError, OrchError
from orchestrator.services import start_api
from orchestrator.store import JobStore


def test_orch_serve_answers_with_its_docs(redis_url: str, namespace: str, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "ORCH_NAMESPACE": namespace,
        "ORCH_DATA_DIR": str(tmp_path),
    }
    exe = Path(sys.executable).parent / "orch"
    proc = subprocess.Popen(
        [str(exe), "serve", "--api-address", "127.0.0.1:0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:\d+", line)
        assert found, line
        url = found.group(0)
        assert httpx.get(f"{url}/docs").status_code == 200
        spec = httpx.get(f"{url}/openapi.json").json()
        assert {"/v1/jobs", "/v1/jobs/batch", "/v1/tokens", "/v1/audit"} <= set(spec["paths"])
        assert httpx.get(f"{url}/v1/jobs").status_code == 401
    finally:
        proc.terminate()
        proc.wait(10)


def test_an_address_in_use_is_a_clear_error(api: ApiServer, store: JobStore) -> None:
    taken = api.url.removeprefix("http://")
    with pytest.raises(OrchError, match=f"cannot listen on {taken}"):
        start(store, taken)


def test_a_stopped_server_has_ended_and_closed_its_connections(store: JobStore) -> None:
    """``stop`` no longer waits on uvicorn's pauses, but still stops cleanly: the serving
    thread has ended, a kept-alive connection was closed and nothing listens any more."""
    server = start(store, "127.0.0.1:0")
    with httpx.Client(base_url=server.url, timeout=5) as client:
        assert client.get("/healthz").status_code == 200  # its connection kept alive, idle
        server.stop()
        assert not server.thread.is_alive() and server.server.should_exit
        with pytest.raises(httpx.ConnectError):
            client.get("/healthz")


def test_orch_up_runs_on_without_the_api_when_its_address_is_taken(
    api: ApiServer, redis_url: str, namespace: str
) -> None:
    settings = Settings(redis_url=redis_url, namespace=namespace, api_address=api.url[7:])
    out = io.StringIO()
    assert start_api(settings, Console(file=out, width=200)) is None
    assert "running without the API" in out.getvalue()


@pytest.mark.parametrize("address", ["8321", "host:", ":80", "host:99999", "host:http"])
def test_a_malformed_address_is_refused(address: str) -> None:
    with pytest.raises(ConfigError):
        parse_address(address)
