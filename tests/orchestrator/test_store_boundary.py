"""Only ``orchestrator/store/`` talks to Redis (ARCHITECTURE: every key has one owner in store/).

Every module of ``orchestrator/`` and ``workers/`` outside ``orchestrator/store/`` is parsed
with :mod:`ast` and checked for the four ways a raw Redis client could be had there:

1. ``redis`` is imported only to name its exception classes: a name bound by ``import redis``
   (``import redis.exceptions as x``...) is used only as ``redis.<...>Error`` /
   ``redis.exceptions.<...>Error`` (or ``...Exception``), and ``from redis import X`` /
   ``from redis.exceptions import X`` only imports such classes. So no module builds a client
   (``redis.Redis``, ``redis.from_url``), annotates a parameter with one, or uses ``redis.client``.
2. No attribute named ``client`` or ``_client`` is read: the store's client (``store.client``)
   and its sub-stores' clients are not reached from outside.
3. The store's helpers that return a raw client (``open_url``, ``connect``) are not imported,
   nor ``open_url`` reached as an attribute: a store is opened with ``JobStore.from_url`` (or
   ``orchestrator.services.open_store``).
4. Optuna's Redis backend (``JournalRedisBackend``) is not named in code (a string, such as the
   optuna-dashboard command, is not code): the store builds the journal (``StudyJournal``).

Nothing is matched by Redis command names (``.set(``, ``.get(``...), which other objects share,
so unrelated code cannot trip it; the rules together leave no client to call them on. The tests
themselves (``tests/``) may use raw clients to look behind the store.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STORE = ROOT / "orchestrator" / "store"
PACKAGES = ("orchestrator", "workers")

_EXCEPTION = re.compile(r"[A-Za-z_]\w*(Error|Exception)$")
_CLIENT_ATTRS = frozenset({"client", "_client"})
_CLIENT_HELPERS = frozenset({"open_url", "connect"})
_STORE_MODULES = frozenset({"orchestrator.store", "orchestrator.store.connection"})


def _outside_store() -> Iterator[Path]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if STORE not in path.parents:
                yield path


def _redis_path(node: ast.Name, parents: dict[ast.AST, ast.AST], base: list[str]) -> list[str]:
    """The dotted path a use of a name bound to ``redis`` (or a submodule) spells out."""
    path = list(base)
    here: ast.AST = node
    while isinstance(parent := parents.get(here), ast.Attribute) and parent.value is here:
        path.append(parent.attr)
        here = parent
    return path


def _allowed_redis_path(path: list[str]) -> bool:
    """``redis.XError`` or ``redis.exceptions.XError``: naming an exception class, no more."""
    if path[:2] == ["redis", "exceptions"]:
        return len(path) == 3 and bool(_EXCEPTION.match(path[2]))
    return len(path) == 2 and path[0] == "redis" and bool(_EXCEPTION.match(path[1]))


def redis_uses(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` for each way ``source`` could get or use a raw Redis client."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    bound: dict[str, list[str]] = {}  # name -> the redis module path it is bound to
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "redis":
                    # `import redis.x` binds `redis`; `import redis.x as y` binds y to redis.x
                    bound[alias.asname or "redis"] = parts if alias.asname else ["redis"]
        elif isinstance(node, ast.ImportFrom) and node.module:
            root = node.module.split(".")[0]
            for alias in node.names:
                if root == "redis" and not (
                    node.module in ("redis", "redis.exceptions") and _EXCEPTION.match(alias.name)
                ):
                    found.append((node.lineno, f"from {node.module} import {alias.name}"))
                if node.module in _STORE_MODULES and alias.name in _CLIENT_HELPERS:
                    found.append((node.lineno, f"from {node.module} import {alias.name}"))
                if alias.name == "JournalRedisBackend":
                    found.append((node.lineno, "imports JournalRedisBackend"))
        elif isinstance(node, ast.Attribute):
            if node.attr in _CLIENT_ATTRS:
                found.append((node.lineno, f"reads .{node.attr}"))
            elif node.attr == "open_url":
                found.append((node.lineno, "reaches open_url"))
            elif node.attr == "JournalRedisBackend":
                found.append((node.lineno, "names JournalRedisBackend"))
        elif isinstance(node, ast.Name) and node.id == "JournalRedisBackend":
            found.append((node.lineno, "names JournalRedisBackend"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in bound:
            path = _redis_path(node, parents, bound[node.id])
            if not _allowed_redis_path(path):
                found.append((node.lineno, f"uses {'.'.join(path)}"))
    return sorted(found)


def test_no_module_outside_the_store_talks_to_redis() -> None:
    modules = list(_outside_store())
    assert ROOT / "orchestrator" / "cli" / "main.py" in modules  # the scan sees the tree
    assert not any(STORE in p.parents for p in modules)
    offences = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in modules
        for line, what in redis_uses(path.read_text(encoding="utf-8"))
    ]
    assert offences == [], (
        "Redis is reached outside orchestrator/store/ (give the key a typed store there):\n"
        + "\n".join(offences)
    )


@pytest.mark.parametrize(
    "source",
    [
        "import redis\nclient = redis.Redis.from_url(url)",
        "import redis\ndef f(c: redis.Redis) -> None: ...",
        "import redis as r\nr.from_url(url)",
        "import redis.client\nx = redis.client.Pipeline",
        "import redis.exceptions as rex\nx = rex.ResponseError.foo",
        "import redis\ndef f(m=redis): ...",
        "from redis import Redis",
        "from redis.client import Pipeline",
        "store.client.set('k', 'v')",
        "self._client.hgetall(key)",
        "from orchestrator.store import open_url",
        "from orchestrator.store.connection import connect",
        "import orchestrator.store as s\ns.open_url(url)",
        "from optuna.storages.journal import JournalRedisBackend",
        "import optuna\noptuna.storages.journal.JournalRedisBackend(url)",
    ],
)
def test_each_way_to_a_raw_client_is_caught(source: str) -> None:
    assert redis_uses(source), source


@pytest.mark.parametrize(
    "source",
    [
        "import redis\ntry:\n    pass\nexcept (redis.RedisError, OSError):\n    pass",
        "import redis.exceptions as rex\nx = rex.ResponseError",
        "import redis\nx = redis.exceptions.ConnectionError",
        "from redis import RedisError",
        "from redis.exceptions import TimeoutError as RTimeout",
        "seen = set()\nseen.add(1)\nsettings.set('a', 1)\ncache.get('k')",  # other objects
        "pipe.hset('k', 'f', 'v')",  # a command name alone is no offence: no client to call it on
        "store.profiles.save(job, profile)\nstore.pool_view.read()",
        "from orchestrator.store import JobStore\nJobStore.from_url(url, ns)",
        "code = 'from optuna.storages.journal import JournalRedisBackend'",
    ],
)
def test_what_is_not_a_raw_client_passes(source: str) -> None:
    assert redis_uses(source) == [], source
