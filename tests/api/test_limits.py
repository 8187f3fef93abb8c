"""Request bodies refused before they are read, over real sockets: no token is 401 before a byte
of the body is taken, and a body past its limit is 413 without being held whole."""

from __future__ import annotations

import json
import select
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from orchestrator.api.limits import BodyLimits
from orchestrator.api.server import ApiServer, start
from orchestrator.config import Settings, parse_size
from orchestrator.errors import ConfigError
from orchestrator.store import JobStore
from tests.api.conftest import http, spec_data

MIB = 1 << 20


def _connect(api: ApiServer) -> socket.socket:
    url = urlsplit(api.url)
    return socket.create_connection((url.hostname, url.port), timeout=10)


def _recv(sock: socket.socket) -> bytes:
    data = sock.recv(65536)
    assert data, "the server closed the connection without an answer"
    return data


def _head(path: str, *headers: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: test", "Content-Type: application/json", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _answer(sock: socket.socket) -> tuple[int, dict[str, str], dict[str, object]]:
    """The status, headers and JSON body of the one answer on ``sock``."""
    raw = b""
    while b"\r\n\r\n" not in raw:
        raw += _recv(sock)
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    while len(body) < int(headers["content-length"]):
        body += _recv(sock)
    return int(status_line.split()[1]), headers, json.loads(body)


def _rss_bytes() -> int:
    """This process's resident memory now (the server runs in a thread of it)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * 4096


def _send_chunked(sock: socket.socket, total: int, chunk: int = 64 * 1024) -> int:
    """Send up to ``total`` bytes as chunks; how many went before the server closed."""
    piece = f"{chunk:x}\r\n".encode() + b"x" * chunk + b"\r\n"
    sent = 0
    try:
        while sent < total:
            sock.sendall(piece)
            sent += chunk
        sock.sendall(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass
    return sent


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads /proc for memory")
@pytest.mark.parametrize("token", [None, "orch_00000000_forged"], ids=["no-token", "bad-token"])
def test_a_chunked_upload_without_a_valid_token_is_401_before_its_body_is_read(
    api: ApiServer, store: JobStore, token: str | None
) -> None:
    auth = [f"Authorization: Bearer {token}"] if token else []
    before = _rss_bytes()
    with _connect(api) as sock:
        sock.sendall(_head("/v1/jobs", "Transfer-Encoding: chunked", *auth))
        # Not a byte of the body is sent yet, and the answer is already there.
        status, headers, body = _answer(sock)
        assert status == 401 and headers["www-authenticate"] == "Bearer"
        assert "API token" in str(body["detail"])
        assert headers["connection"] == "close"  # the rest is not received
        sent = _send_chunked(sock, 20 * MIB)
    # Either the server closed before all was sent, or it threw the bytes away: it never held
    # the 20 MB (the test's own sends are 64 KiB at a time).
    assert sent < 20 * MIB or _rss_bytes() - before < 10 * MIB
    assert store.list() == []


def test_a_declared_length_past_the_limit_is_413_before_the_body_is_read(
    api: ApiServer, tokens: dict[str, str]
) -> None:
    with _connect(api) as sock:
        sock.sendall(
            _head(
                "/v1/jobs",
                f"Content-Length: {100 * MIB}",
                f"Authorization: Bearer {tokens['admin']}",
            )
        )
        status, headers, body = _answer(sock)
    assert status == 413 and headers["connection"] == "close"
    assert body["detail"] == (
        "the request body is 104,857,600 bytes; at most 1,048,576 bytes allowed here "
        "(the server's ORCH_API_MAX_BODY)"
    )


def test_a_small_body_without_a_token_is_401_and_the_client_reads_it(api: ApiServer) -> None:
    # A declared body small enough to drain keeps the connection: a client that sends its whole
    # body before reading (httpx, requests) gets the 401, not a reset.
    with httpx.Client(base_url=api.url, timeout=30) as client:
        for _ in range(3):
            reply = client.post("/v1/jobs", json=spec_data())
            assert reply.status_code == 401 and "connection" not in reply.headers


@pytest.fixture
def small_api(store: JobStore, monkeypatch: pytest.MonkeyPatch) -> Iterator[ApiServer]:
    """The API with 8 KiB bodies (64 KiB for a batch), as ``ORCH_API_MAX_BODY`` sets them."""
    monkeypatch.setenv("ORCH_API_MAX_BODY", "8K")
    monkeypatch.setenv("ORCH_API_MAX_BATCH_BODY", "64KiB")
    server = start(store, "127.0.0.1:0")
    yield server
    server.stop()


JSON = {"Content-Type": "application/json"}


def _padded(size: int, name: str = "padded") -> str:
    """A valid job as JSON text of about ``size`` bytes (whitespace inside its object: the
    limits count the body's bytes, whatever they hold)."""
    text = json.dumps(spec_data(name=name))
    return "{" + " " * max(0, size - len(text)) + text[1:]


def _batch(jobs: list[str]) -> str:
    return '{"jobs": [' + ", ".join(jobs) + "]}"


def test_the_limits_are_the_settings_and_the_batch_route_takes_more(
    small_api: ApiServer, store: JobStore, tokens: dict[str, str]
) -> None:
    with http(small_api, tokens["admin"]) as client:
        one = client.post("/v1/jobs", content=_padded(16 * 1024), headers=JSON)
        chunks = (b"x" * 4096 for _ in range(4))  # no length declared: counted as it comes
        streamed = client.post("/v1/jobs", content=chunks)
        batch = client.post(
            "/v1/jobs/batch",
            content=_batch([_padded(6 * 1024, f"j{i}") for i in range(4)]),
            headers=JSON,
        )
        too_big_batch = client.post(
            "/v1/jobs/batch",
            content=_batch([_padded(6 * 1024, f"k{i}") for i in range(12)]),
            headers=JSON,
        )
        fits = client.post("/v1/jobs", content=_padded(6 * 1024, "fits"), headers=JSON)
    assert one.status_code == 413 and "ORCH_API_MAX_BODY" in one.json()["detail"]
    assert streamed.status_code == 413
    assert streamed.json()["detail"].startswith("the request body is over 8,192 bytes")
    assert batch.status_code == 201, batch.text
    assert too_big_batch.status_code == 413
    assert "at most 65,536 bytes" in too_big_batch.json()["detail"]
    assert "ORCH_API_MAX_BATCH_BODY" in too_big_batch.json()["detail"]
    assert fits.status_code == 201, fits.text
    assert len(store.list()) == 5


@pytest.fixture
def impatient_api(store: JobStore, monkeypatch: pytest.MonkeyPatch) -> Iterator[ApiServer]:
    """The API waiting at most a second for a body, as ``ORCH_API_BODY_TIMEOUT`` sets it."""
    monkeypatch.setenv("ORCH_API_BODY_TIMEOUT", "1s")
    server = start(store, "127.0.0.1:0")
    yield server
    server.stop()


def _trickle(socks: list[socket.socket], size: int) -> None:
    """Send each body a byte at a time, until the server has answered every socket (or, past
    ``size`` bytes, the bodies are whole)."""
    waiting = list(socks)
    for _ in range(size):
        answered = select.select(waiting, [], [], 0.1)[0]
        waiting = [s for s in waiting if s not in answered]
        if not waiting:
            return
        for sock in waiting:
            sock.sendall(b" ")


def _closed(sock: socket.socket) -> bool:
    """Whether the server closed the connection (the next read ends or is reset)."""
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True


@pytest.mark.parametrize(
    ("path", "framing"),
    [
        ("/v1/jobs", "Content-Length: 200"),
        ("/v1/teams", "Content-Length: 200"),
        ("/v1/jobs/batch", "Transfer-Encoding: chunked"),
    ],
)
def test_a_body_that_trickles_in_is_408_and_its_connection_closed(
    impatient_api: ApiServer, store: JobStore, tokens: dict[str, str], path: str, framing: str
) -> None:
    method = "PUT" if path == "/v1/teams" else "POST"
    slow = [_connect(impatient_api) for _ in range(3)]
    for sock in slow:
        head = _head(path, f"Authorization: Bearer {tokens['admin']}", framing)
        sock.sendall(head.replace(b"POST", method.encode(), 1))
        if "chunked" in framing:
            sock.sendall(b"c8\r\n")  # one chunk of 200 bytes, sent a byte at a time
    _trickle(slow, 200)
    for sock in slow:
        status, headers, body = _answer(sock)
        assert status == 408, body
        assert body == {
            "detail": "the request body did not arrive within 1 s "
            "(the server's ORCH_API_BODY_TIMEOUT)"
        }
        assert headers["connection"] == "close"
        assert _closed(sock)
        sock.close()
    assert store.list() == [] and store.teams() is None
    with http(impatient_api, tokens["admin"]) as client:  # a body sent at once still goes in
        assert client.post("/v1/jobs", json=spec_data()).status_code == 201


def test_body_limits_read_sizes() -> None:
    assert parse_size("1M") == parse_size("1MiB") == MIB and parse_size(" 512k ") == 512 * 1024
    assert parse_size("65536") == 65536 and parse_size("2g") == 2 << 30
    with pytest.raises(ValueError, match="1M, 512K"):
        parse_size("lots")
    limits = BodyLimits.from_settings(Settings.from_env(api_max_body="2M"))
    assert limits.of("/v1/jobs") == (2 * MIB, "ORCH_API_MAX_BODY")
    assert limits.of("/v1/jobs/batch") == (32 * MIB, "ORCH_API_MAX_BATCH_BODY")
    with pytest.raises(ConfigError, match="ORCH_API_MAX_BODY"):
        Settings.from_env(api_max_body="12")  # under 1 KiB
    assert Settings.from_env().api_body_timeout_s == 30.0
    assert BodyLimits.from_settings(Settings.from_env(api_body_timeout_s="2m")).timeout_s == 120
    with pytest.raises(ConfigError, match="ORCH_API_BODY_TIMEOUT"):
        Settings.from_env(api_body_timeout_s="soon")
