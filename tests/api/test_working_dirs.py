"""A command job through the API: its working directory is uploaded (``PUT
/v1/working-dirs``), then the job names its digest; `orch submit --working-dir` does both in
API mode. Viewers, non-zips, bombs and names leaving the folder are refused, nothing stored."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from orchestrator.api.server import ApiServer
from orchestrator.client import Client
from orchestrator.errors import ApiError
from orchestrator.store import JobStore
from orchestrator.workdir import MAX_MB_ENV, pack
from tests.api.conftest import http

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "own_script"


def _zip(**files: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name.replace("__", "/"), data)
    return buffer.getvalue()


def _workdir_keys(store: JobStore) -> list[str]:
    return list(store.client.scan_iter(match=store.keys.working_dir("*")))


def test_a_member_uploads_a_working_dir_and_submits_a_command_job(
    api: ApiServer, tokens: dict[str, str], store: JobStore
) -> None:
    member = Client(api.url, tokens["member"])
    packed = pack(EXAMPLE)
    digest = member.put_working_dir(packed.data)
    assert digest == packed.digest and store.working_dirs.get(digest) == packed.data
    job = {
        "name": "own",
        "team": "vision",
        "class": "bulk",
        "workload": {"command": ["python", "train.py"], "working_dir": digest},
        "sla": {"throughput": {"min_samples_per_s": 1}},
        "run": {"steps": 5},
    }
    job_id = member.submit(job)
    assert member.show(job_id).job.spec["workload"]["working_dir"] == digest
    assert [e.action for e in store.audit.read(10)][-2:] == ["working-dir", "submit"]


def test_refused_uploads_write_nothing(
    api: ApiServer, tokens: dict[str, str], store: JobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = pack(EXAMPLE).data
    with http(api, tokens["viewer"]) as viewer:
        assert viewer.put("/v1/working-dirs", content=good).status_code == 403
    with http(api) as anonymous:
        assert anonymous.put("/v1/working-dirs", content=good).status_code == 401
    with http(api, tokens["member"]) as member:
        reply = member.put("/v1/working-dirs", content=b"not a zip at all")
        assert reply.status_code == 422 and "must be a zip archive" in reply.text
        reply = member.put("/v1/working-dirs", content=_zip(**{"..__evil.py": b"x"}))
        assert reply.status_code == 422 and "outside it" in reply.text
        monkeypatch.setenv(MAX_MB_ENV, "1")  # a zip bomb: small packed, large unpacked
        bomb = _zip(zeros=b"\0" * 3_000_000)
        assert len(bomb) < 100_000
        reply = member.put("/v1/working-dirs", content=bomb)
        assert (
            reply.status_code == 422 and "unpacks to 3.0 MB, over the limit of 1 MB" in reply.text
        )
    assert _workdir_keys(store) == []


def test_cli_submit_with_working_dir_in_api_mode(
    api: ApiServer, tokens: dict[str, str], store: JobStore, tmp_path: Path
) -> None:
    job = (EXAMPLE / "job.yaml").read_text().replace("team: e2e", "team: vision")
    (tmp_path / "job.yaml").write_text(job)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "ORCH_API_URL": api.url,
        "ORCH_TOKEN": tokens["member"],
    }
    out = subprocess.run(
        [
            str(Path(sys.executable).parent / "orch"),
            "submit",
            "--working-dir",
            ".",
            str(tmp_path / "job.yaml"),
        ],
        env=env,
        cwd=EXAMPLE,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    (rec,) = store.list()
    assert rec.spec.workload.working_dir == pack(EXAMPLE).digest
    assert store.working_dirs.exists(pack(EXAMPLE).digest)


def test_the_client_reports_a_refusal(api: ApiServer, tokens: dict[str, str]) -> None:
    with pytest.raises(ApiError) as refused:
        Client(api.url, tokens["viewer"]).put_working_dir(pack(EXAMPLE).data)
    assert refused.value.status == 403
