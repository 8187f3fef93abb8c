"""A command job's working directory: packed on the submitter's side (skips, links, the size
limit), stored by digest, and submitted with the CLI (real `orch`, real Redis)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from orchestrator.api.operations import verdict_of
from orchestrator.spec import parse_spec
from orchestrator.store import JobStore
from orchestrator.workdir import MAX_MB_ENV, WorkingDirError, max_bytes, pack
from workers.steps import CommandSteps

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "own_script"


def _tree(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "train.py").write_text("print('hi')\n")
    (root / "pkg" / "model.py").write_text("X = 1\n")
    for skipped in (".git", "__pycache__", ".venv"):
        (root / skipped).mkdir()
        (root / skipped / "big.bin").write_bytes(b"x" * 1000)
    return root


def _names(data: bytes) -> list[str]:
    return zipfile.ZipFile(io.BytesIO(data)).namelist()


def test_pack_ships_the_files_at_its_root_and_skips_caches(tmp_path: Path) -> None:
    packed = pack(_tree(tmp_path / "w"))
    assert _names(packed.data) == ["pkg/model.py", "train.py"]
    assert packed.files == 2 and packed.size == len("print('hi')\n") + len("X = 1\n")


def test_the_same_files_give_the_same_digest_and_a_change_another(tmp_path: Path) -> None:
    first = pack(_tree(tmp_path / "a"))
    again = pack(_tree(tmp_path / "b"))  # other folder, other times: same content
    assert first.digest == again.digest and first.digest.startswith("sha256:")
    (tmp_path / "b" / "train.py").write_text("print('changed')\n")
    assert pack(tmp_path / "b").digest != first.digest


def test_a_folder_past_the_limit_is_refused_naming_its_size_and_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _tree(tmp_path / "w")
    (root / "data.bin").write_bytes(os.urandom(300_000))
    monkeypatch.setenv(MAX_MB_ENV, "0.2")
    assert max_bytes() == 200_000
    with pytest.raises(WorkingDirError, match=r"0\.3 MB of files, over the limit of 0\.2 MB"):
        pack(root)
    monkeypatch.setenv(MAX_MB_ENV, "lots")
    with pytest.raises(WorkingDirError, match=f"{MAX_MB_ENV} must be a number"):
        max_bytes()


def test_a_link_leaving_the_folder_is_refused_and_one_inside_is_packed(tmp_path: Path) -> None:
    root = _tree(tmp_path / "w")
    (root / "same.py").symlink_to(root / "train.py")
    (root / "lib").symlink_to(root / "pkg")
    names = _names(pack(root).data)
    assert "same.py" in names and "lib/model.py" in names
    secret = tmp_path / "secret.txt"
    secret.write_text("password")
    (root / "leak.txt").symlink_to(secret)
    with pytest.raises(WorkingDirError, match=r"is a link to .*secret\.txt, outside"):
        pack(root)


def test_not_a_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(WorkingDirError, match="not a folder"):
        pack(tmp_path / "missing")


def test_the_store_keeps_a_working_dir_by_digest_and_refuses_a_job_naming_another(
    store: JobStore,
) -> None:
    packed = pack(EXAMPLE)
    assert not store.working_dirs.exists(packed.digest)
    assert store.working_dirs.put(packed.data) == packed.digest
    assert store.working_dirs.get(packed.digest) == packed.data
    unknown = "sha256:" + "1" * 64
    assert store.working_dirs.get(unknown) is None
    job = {
        "name": "own",
        "team": "t",
        "class": "bulk",
        "workload": {"command": ["python", "train.py"], "working_dir": unknown},
        "sla": {"throughput": {"min_samples_per_s": 1}},
        "run": {"steps": 5},
    }
    with pytest.raises(Exception, match=f"workload.working_dir {unknown} is not stored"):
        store.submit(parse_spec(job))
    assert store.list() == []
    job["workload"] = {"command": ["python", "train.py"], "working_dir": packed.digest}
    assert store.submit(parse_spec(job)).spec.workload.working_dir == packed.digest


def _orch(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "orch"
    return subprocess.run(
        [str(exe), *args],
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},  # this checkout's orchestrator
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_submits_the_example_from_its_folder_and_refuses_a_big_one(
    redis_url: str, store: JobStore, tmp_path: Path
) -> None:
    env = {
        "REDIS_URL": redis_url,
        "ORCH_NAMESPACE": store.namespace,
        "ORCH_DATA_DIR": str(tmp_path),
    }
    out = _orch("submit", "--working-dir", ".", "job.yaml", env=env, cwd=EXAMPLE)
    assert out.returncode == 0, out.stderr
    (rec,) = store.list()
    digest = rec.spec.workload.working_dir
    assert digest == pack(EXAMPLE).digest and rec.spec.workload.command == ["python", "train.py"]
    assert _names(store.working_dirs.get(digest) or b"") == ["job.yaml", "train.py"]
    # the SLA verdict of a command job, from the reports its worker makes (workers.steps)
    steps = CommandSteps(warmup_steps=0, global_batch=32, total_steps=300)
    for step in range(1, 6):
        steps.add({"step": step, "s": 0.1, "samples": 32, "tokens": None, "loss": 0.5})
    store.put_metrics(rec.id, steps.report("running", 100.0))
    verdict = verdict_of(store, store.get(rec.id))
    assert verdict.met is True and verdict.target == ">= 10 samples/s", verdict
    shown = _orch("show", rec.id, env=env, cwd=tmp_path)
    assert shown.returncode == 0 and "python train.py" in shown.stdout, shown.stderr

    before = sorted(store.client.scan_iter(match=store.keys.pattern))
    big = tmp_path / "big"
    big.mkdir()
    (big / "weights.bin").write_bytes(b"\0" * 3_000_000)
    env[MAX_MB_ENV] = "2"
    out = _orch(
        "submit", "--working-dir", str(big), str(EXAMPLE / "job.yaml"), env=env, cwd=tmp_path
    )
    assert out.returncode == 2
    said = " ".join(out.stderr.split())  # the console wraps it where the folder's path ends
    assert "3.0 MB of files, over the limit of 2 MB (ORCH_WORKING_DIR_MAX_MB)" in said
    assert "Traceback" not in out.stderr
    assert sorted(store.client.scan_iter(match=store.keys.pattern)) == before  # nothing written
