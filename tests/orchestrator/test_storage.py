"""Where checkpoints go: ``ORCH_CHECKPOINT_URI`` (a path or a URL), one folder per namespace
and job, named the same way for a path and a URL."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config import Settings
from orchestrator.errors import ConfigError
from orchestrator.storage import StorageLocation


def test_checkpoints_default_to_the_data_directory(tmp_path: Path) -> None:
    root = Settings(data_dir=tmp_path, namespace="ns").checkpoint_dir
    assert root == StorageLocation(str(tmp_path.resolve() / "checkpoints" / "ns"))
    assert str(root / "job-1") == str(tmp_path.resolve() / "checkpoints" / "ns" / "job-1")
    assert not root.is_url


def test_a_checkpoint_url_keeps_its_scheme(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_CHECKPOINT_URI", "s3://bucket/orch-ckpt/")
    root = Settings.from_env(namespace="ns").checkpoint_dir
    assert root.is_url and str(root / "job-1") == "s3://bucket/orch-ckpt/ns/job-1"


def test_a_checkpoint_path_is_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    root = Settings.from_env(checkpoint_uri="shared/ckpt", namespace="ns").checkpoint_dir
    assert str(root) == str(tmp_path.resolve() / "shared" / "ckpt" / "ns")


def test_a_bad_checkpoint_url_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_CHECKPOINT_URI", "3x://bucket")
    with pytest.raises(ConfigError, match=r"ORCH_CHECKPOINT_URI: .*s3://bucket/prefix"):
        Settings.from_env()


def test_removing_a_folder_says_whether_there_was_one(tmp_path: Path) -> None:
    job = StorageLocation(str(tmp_path)) / "job-1"
    (Path(job.uri) / "step-000000001").mkdir(parents=True)
    assert job.remove() is True and not Path(job.uri).exists()
    assert job.remove() is False
