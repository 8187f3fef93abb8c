"""Named API contexts (as kubectl's): ``orch login`` keeps a server's URL and token under a name
in a config file only its owner may read, and the commands use the current one.

Which API a command talks to, first match wins: ``ORCH_API_URL`` and ``ORCH_TOKEN``; the context
named by ``ORCH_CONTEXT``; the file's current context; none (direct store access, as an admin).
The file is ``$ORCH_CONFIG``, else ``~/.config/orch/config.yaml``::

    current: prod
    contexts:
      prod: {url: https://orch.example.com, token: orch_...}
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from orchestrator.cli.output import Output, OutputOption, console, print_data
from orchestrator.errors import ConfigError, OptionError

__all__ = ["Context", "config_path", "current_context", "register"]

CONTEXT_NAME = r"^[a-z0-9][a-z0-9._-]{0,62}$"


@dataclass(frozen=True)
class Context:
    """One API server and the token to use there."""

    name: str
    url: str
    token: str


def config_path() -> Path:
    """The contexts file: ``$ORCH_CONFIG``, else ``~/.config/orch/config.yaml``."""
    given = os.environ.get("ORCH_CONFIG", "").strip()
    return Path(given) if given else Path.home() / ".config" / "orch" / "config.yaml"


def _read() -> dict[str, Any]:
    from orchestrator.inputs import load_document

    path = config_path()
    if not path.exists():
        return {"current": None, "contexts": {}}
    data = load_document(path)
    if not isinstance(data, dict) or not isinstance(data.get("contexts", {}), dict):
        raise ConfigError(f"{path}: not a contexts file (contexts: {{NAME: {{url, token}}}})")
    data.setdefault("contexts", {})
    return data


def _write(data: dict[str, Any]) -> None:
    """Write the file whole, owner-only (0600) from its first byte: a token never sits in a
    file others may read, not even between a write and a chmod."""
    import yaml

    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temp = path.with_name(path.name + ".tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        yaml.safe_dump(data, out, sort_keys=False)
    os.chmod(temp, 0o600)  # an older temp file may have had wider rights
    os.replace(temp, path)


def current_context() -> Context | None:
    """The context commands use (``ORCH_CONTEXT``, else the file's current one), or ``None``.

    Raises:
        ConfigError: the file cannot be read, or ``ORCH_CONTEXT`` names no context.
    """
    named = os.environ.get("ORCH_CONTEXT", "").strip()
    path = config_path()
    if not named and not path.exists():
        return None
    data = _read()
    name = named or data.get("current")
    if not name:
        return None
    entry = data["contexts"].get(name)
    if not isinstance(entry, dict) or not entry.get("url") or not entry.get("token"):
        known = ", ".join(sorted(data["contexts"])) or "none"
        raise ConfigError(f"no context {name!r} in {path} (known: {known}); `orch login` adds one")
    return Context(str(name), str(entry["url"]), str(entry["token"]))


def _name(value: str) -> str:
    if re.fullmatch(CONTEXT_NAME, value) is None:
        raise OptionError("--context", f"must be 1-63 of a-z 0-9 . _ -, got {value!r}")
    return value


def login(
    url: Annotated[str, typer.Option(help="The API server (http://HOST:8321).")],
    context: Annotated[str, typer.Option(help="A name for it.", callback=_name)] = "default",
    token_stdin: Annotated[
        bool, typer.Option("--token-stdin", help="Read the token from stdin (for scripts).")
    ] = False,
) -> None:
    """Keep an API server's URL and a token under a name and make it current: the commands go
    through that API as the token's principal (the token is checked first, and kept in a file
    only you may read)."""
    from orchestrator.client import Client

    if not re.match(r"^https?://[^\s/]+", url):
        raise OptionError("--url", f"must be an http:// or https:// URL, got {url!r}")
    if token_stdin:
        import sys

        token = sys.stdin.readline().strip()
    else:
        token = typer.prompt("token", hide_input=True).strip()
    if not token:
        raise OptionError("token", "is empty")
    with Client(url, token) as client:
        me = client.whoami()  # a refused token is said now (exit 2), not at the next command
    data = _read()
    data["contexts"][context] = {"url": url.rstrip("/"), "token": token}
    data["current"] = context
    _write(data)
    team = f" of team {me.team}" if me.team else ""
    console.print(
        f"logged in to {url} as {me.name} ({me.role.value}{team}); context {context!r} is "
        f"current ({config_path()})",
        highlight=False,
    )


def logout(
    context: Annotated[
        str | None, typer.Option(help="The context to forget (default: the current one).")
    ] = None,
) -> None:
    """Forget a context and its token; with none current, commands reach the store directly."""
    data = _read()
    name = context or data.get("current")
    if not name or name not in data["contexts"]:
        raise OptionError("--context", f"names no saved context, got {name!r}")
    del data["contexts"][name]
    if data.get("current") == name:
        data["current"] = None
    _write(data)
    console.print(f"context {name!r} forgotten", highlight=False)


def contexts(
    use: Annotated[
        str | None, typer.Option(help="Make this context current.", callback=_opt_name)
    ] = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """List the saved contexts (never a token), or make one current with --use."""
    data = _read()
    if use is not None:
        if use not in data["contexts"]:
            known = ", ".join(sorted(data["contexts"])) or "none"
            raise OptionError("--use", f"names no saved context (known: {known}), got {use!r}")
        data["current"] = use
        _write(data)
    rows = [
        {"name": name, "url": entry.get("url"), "current": name == data.get("current")}
        for name, entry in sorted(data["contexts"].items())
    ]
    if output.data:
        print_data(rows, output)
        return
    for row in rows:
        mark = "*" if row["current"] else " "
        console.print(f"{mark} {row['name']}  {row['url']}", highlight=False)
    if not rows:
        console.print("no saved contexts (`orch login --url URL` adds one)")


def _opt_name(value: str | None) -> str | None:
    return None if value is None else _name(value)


def register(app: typer.Typer) -> None:
    """Add ``login``, ``logout`` and ``contexts`` to ``app``."""
    app.command()(login)
    app.command()(logout)
    app.command()(contexts)
