"""``ORCH_REDIS_BIND``: the embedded Redis on an address other hosts reach, still with its password.

No namespaces needed: 127.0.0.2 is another address of this host (all of 127/8 is loopback), so
it stands for "this host's address on the network". The multi-host tests (``test_hosts``) run
the same setting on a head that workers reach over a real (namespace) network.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from orchestrator.config import Settings
from orchestrator.errors import ConfigError
from orchestrator.store import EmbeddedRedis, open_url, resolve_url

OTHER = "127.0.0.2"


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """A data directory whose embedded server is stopped at the end."""
    yield tmp_path / "data"
    EmbeddedRedis(tmp_path / "data").stop()


def _pid(data_dir: Path) -> str:
    return (data_dir / "redis" / "redis.pid").read_text()


def test_the_url_names_the_bound_address_which_wants_the_password(data_dir: Path) -> None:
    url = resolve_url(Settings(data_dir=data_dir, redis_bind=OTHER))
    parts = urlsplit(url)
    assert parts.hostname == OTHER and parts.password
    assert open_url(url).ping()
    stranger = redis.Redis(host=OTHER, port=parts.port or 0, retry=Retry(NoBackoff(), 0))
    with pytest.raises(redis.AuthenticationError):
        stranger.ping()
    stranger.close()
    # Loopback still serves this host's commands (orch list, orch submit).
    local = EmbeddedRedis(data_dir).ensure_running()
    assert urlsplit(local).hostname == "127.0.0.1" and open_url(local).ping()


def test_a_server_on_loopback_only_is_restarted_on_the_address_asked(data_dir: Path) -> None:
    EmbeddedRedis(data_dir).ensure_running()
    before = _pid(data_dir)
    url = EmbeddedRedis(data_dir, OTHER).ensure_running()
    assert _pid(data_dir) != before and open_url(url).ping()
    # Asking for loopback again keeps the wider server (loopback is always bound): no flapping
    # between a CLI command and `orch up`.
    EmbeddedRedis(data_dir).ensure_running()
    assert open_url(url).ping()


@pytest.mark.parametrize("value", ["0.0.0.0", "::", "head.example", ""])
def test_the_bind_setting_is_one_address_of_this_host(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORCH_REDIS_BIND", value)
    if not value:  # unset: loopback
        assert Settings.from_env().redis_bind == "127.0.0.1"
        return
    with pytest.raises(ConfigError, match="ORCH_REDIS_BIND"):
        Settings.from_env()
