"""`orch login` and named contexts: a checked token kept owner-only, the current context used by
every command, the variables before the contexts, `orch logout` back to direct access."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from orchestrator.api.server import ApiServer


def orch(
    *args: str, env: dict[str, str], stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "orch"
    return subprocess.run(
        [str(exe), *args], env=env, input=stdin, capture_output=True, text=True, timeout=60
    )


def test_login_keeps_a_checked_token_that_every_command_then_uses(
    api: ApiServer, tokens: dict[str, str], tmp_path: Path
) -> None:
    config = tmp_path / "home" / "orch.yaml"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("ORCH_", "REDIS_"))},
        "ORCH_CONFIG": str(config),
        "REDIS_URL": "redis://127.0.0.1:1/0",  # direct access would fail: the API must carry it
    }
    refused = orch("login", "--url", api.url, "--token-stdin", env=env, stdin="orch_bad\n")
    assert refused.returncode == 2 and not config.exists()  # nothing kept for a bad token

    member = orch(
        "login", "--url", api.url, "--context", "lab", "--token-stdin",
        env=env, stdin=tokens["member"] + "\n",
    )  # fmt: skip
    assert member.returncode == 0, member.stderr
    assert "as " in member.stdout and "team vision" in member.stdout
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert json.loads(orch("whoami", "-o", "json", env=env).stdout)["team"] == "vision"

    orch("login", "--url", api.url, "--context", "ops", "--token-stdin", env=env,
         stdin=tokens["admin"] + "\n")  # fmt: skip
    assert json.loads(orch("whoami", "-o", "json", env=env).stdout)["role"] == "admin"
    listed = json.loads(orch("contexts", "-o", "json", env=env).stdout)
    assert [(c["name"], c["current"]) for c in listed] == [("lab", False), ("ops", True)]
    assert tokens["admin"] not in orch("contexts", env=env).stdout  # never a token
    as_lab = {**env, "ORCH_CONTEXT": "lab"}
    assert json.loads(orch("whoami", "-o", "json", env=as_lab).stdout)["team"] == "vision"
    by_env = {**env, "ORCH_API_URL": api.url, "ORCH_TOKEN": tokens["member"]}
    assert json.loads(orch("whoami", "-o", "json", env=by_env).stdout)["role"] == "member"

    unknown = orch("contexts", "--use", "prod", env=env)
    assert unknown.returncode == 2 and "known: lab, ops" in unknown.stderr
    assert orch("logout", env=env).returncode == 0
    assert orch("logout", "--context", "lab", env=env).returncode == 0
    direct = orch("whoami", env=env)  # no context left: the store, which is not there
    assert direct.returncode != 0 and "Traceback" not in direct.stderr
