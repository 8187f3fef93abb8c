"""A stand-in for a service's HTTP endpoint, on a real socket (the standard library's threaded
HTTP server: no FastAPI, so the light client's tests can use it too), as the API's contract
says it answers:

- ``GET /v1/services/{job}`` (bearer token): ``{"job_id", "ready_replicas", "input"}``, or 404;
- ``POST /v1/services/{job}/infer`` with ``{"input": <one sample>}``: 200 ``{"output",
  "timing"}`` after a fixed service time; 422 for an input of the wrong shape or values.

A test scripts the rest: one stall (the first request at or after ``stall_at`` seconds from
:meth:`ServiceStub.start_clock` holds every request for ``stall_s``), and answers by arrival
order (``script[i % len(script)]``: ``"ok"``, ``"503"``, ``"504"``, ``"slow"`` (answered after
``slow_s``), ``"drop"`` (the connection closed, no answer)).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN = "orch_stub-token"
JOB_ID = "0a1b2c3d"
NAMES = {JOB_ID: JOB_ID, "scorer": JOB_ID}  # a job's id and its name both find it
INPUT = {"shape": [2, 3], "dtype": "int64", "high": 50}


class ServiceStub(ThreadingHTTPServer):
    """The endpoint, its script, and what it received (``inputs``, ``paths``, ``arrived``:
    seconds from the clock's start; ``peers``: the connections they came on)."""

    daemon_threads = True
    request_queue_size = 256  # a burst of new connections is not refused by the backlog

    def __init__(
        self,
        *,
        service_s: float = 0.002,
        stall_at: float | None = None,
        stall_s: float = 0.5,
        script: tuple[str, ...] = ("ok",),
        slow_s: float = 1.0,
        advertised: dict[str, Any] | None = None,
        ready_replicas: int = 1,
    ) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.service_s = service_s
        self.stall_at = stall_at
        self.stall_s = stall_s
        self.script = script
        self.slow_s = slow_s
        self.advertised = INPUT if advertised is None else advertised
        self.ready_replicas = ready_replicas
        self.lock = threading.Lock()
        self.gate = threading.Lock()  # held through the stall
        self.stalled = False
        self.count = 0
        self.t0 = time.monotonic()
        self.inputs: list[Any] = []
        self.arrived: list[float] = []
        self.paths: list[str] = []
        self.peers: set[Any] = set()  # the client's connections (their addresses)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def start_clock(self) -> None:
        """Time 0 of ``stall_at`` (a load run's start)."""
        self.t0 = time.monotonic()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Quiet: a client that gave up on a slow answer closed its socket."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the client's pool reuses its connections
    # an answer leaves in one write, at once: headers and body written apart, Nagle's
    # algorithm held the body for the client's delayed ACK (~40 ms an answer)
    disable_nagle_algorithm = True
    wbufsize = 1 << 16  # flushed after each request (``handle_one_request``)
    server: ServiceStub

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _job(self) -> str | None:
        """The job the path names (``/v1/services/{job}[/infer]``), or ``None`` after
        answering 401 or 404."""
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self._send(401, {"detail": "no valid token"})
            return None
        parts = self.path.split("/")
        job = NAMES.get(parts[3]) if len(parts) > 3 and parts[1:3] == ["v1", "services"] else None
        if job is None:
            self._send(404, {"detail": f"no job matches {self.path!r}"})
        return job

    def do_GET(self) -> None:
        job = self._job()
        if job is None:
            return
        stub = self.server
        body = {"job_id": job, "ready_replicas": stub.ready_replicas, "input": stub.advertised}
        self._send(200, body)

    def do_POST(self) -> None:
        stub = self.server
        data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self._job() is None or not self.path.endswith("/infer"):
            return
        now = time.monotonic() - stub.t0
        with stub.lock:
            step = stub.script[stub.count % len(stub.script)]
            stub.count += 1
            stall = stub.stall_at is not None and not stub.stalled and now >= stub.stall_at
            stub.stalled = stub.stalled or stall
            stub.arrived.append(now)
            stub.paths.append(self.path)
            stub.peers.add(self.client_address)
        sample = json.loads(data)["input"]
        with stub.lock:
            stub.inputs.append(sample)
        with stub.gate:  # waits while a stall holds it
            if stall:
                time.sleep(stub.stall_s)
        if step == "drop":
            self.close_connection = True
            return
        if step == "503":
            self._send(503, {"detail": "no ready replica"}, {"Retry-After": "1"})
            return
        time.sleep(stub.slow_s if step == "slow" else stub.service_s)
        if step == "504":
            self._send(504, {"detail": "the request timed out"})
        elif not _fits(sample, stub.advertised):
            self._send(422, {"detail": "input: not the advertised shape or values"})
        else:
            self._send(200, {"output": [0.0], "timing": {"service_ms": stub.service_s * 1e3}})


def _fits(sample: Any, spec: dict[str, Any]) -> bool:
    """Whether ``sample`` has the advertised shape, and its values the dtype and range."""

    def walk(value: Any, shape: list[int]) -> bool:
        if not shape:
            if spec["dtype"] == "int64":
                high = spec.get("high")
                return isinstance(value, int) and 0 <= value < (high if high else 1)
            return isinstance(value, float)
        return (
            isinstance(value, list)
            and len(value) == shape[0]
            and all(walk(v, shape[1:]) for v in value)
        )

    return walk(sample, list(spec["shape"]))


@contextmanager
def serving(**kwargs: Any) -> Iterator[ServiceStub]:
    """A :class:`ServiceStub` answering on 127.0.0.1 (a free port) until the block ends."""
    stub = ServiceStub(**kwargs)
    thread = threading.Thread(target=stub.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield stub
    finally:
        stub.shutdown()
        stub.server_close()
        thread.join(5)
