"""Checkpoints in object storage: ``s3://`` against a real S3-compatible server (moto's, in a
thread of the test process, on a free port), through fsspec and DCP's fsspec storage."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("s3fs", reason="s3fs is not installed (pip install -e '.[dev]')")
moto_server = pytest.importorskip(
    "moto.server", reason="moto[server] is not installed (pip install -e '.[dev]')"
)

from orchestrator.storage import StorageLocation  # noqa: E402
from tests.workers.helpers import tiny  # noqa: E402
from tests.workers.test_checkpoint import same_params, stop_after  # noqa: E402
from workers.checkpoint import CHECKPOINT_FILE, load_checkpoint  # noqa: E402
from workers.distributed import find_free_port  # noqa: E402
from workers.harness import Harness  # noqa: E402

BUCKET = "orch-checkpoints"


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """An S3 server on loopback, with the bucket made; its URL."""
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=find_free_port())
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """The workers' environment for that server: the usual AWS variables, nothing else."""
    import fsspec

    for name, value in {
        "AWS_ENDPOINT_URL": s3_endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    fsspec.AbstractFileSystem.clear_instance_cache()  # filesystems made for another endpoint
    fs = fsspec.filesystem("s3")
    if not fs.exists(BUCKET):
        fs.mkdir(BUCKET)
    yield fs
    fsspec.AbstractFileSystem.clear_instance_cache()


def test_a_job_checkpoints_to_s3_and_resumes_from_it(s3: object) -> None:
    url = f"s3://{BUCKET}/orch/job-1"
    config = tiny("mlp", steps=6, checkpoint_every=2)
    straight = Harness(config)
    straight.run()

    stopped = Harness(config, checkpoint_dir=url, should_stop=stop_after(3)).run()
    assert stopped.status == "stopped" and stopped.checkpoint_path == f"{url}/step-000000003"
    resumed = Harness(config, checkpoint_dir=url)
    result = resumed.run()
    assert (result.resumed_from_step, result.steps_done) == (3, 6)
    assert same_params(straight.model, resumed.model)

    names = sorted(p.rsplit("/", 1)[-1] for p in s3.ls(f"{BUCKET}/orch/job-1"))  # type: ignore[attr-defined]
    assert names == [CHECKPOINT_FILE, "step-000000006"]  # older steps deleted on commit
    record = load_checkpoint(url, "mlp", config.workload_args)
    assert record is not None and record.step == 6

    # retention removes the job's folder (orch gc), and says when there was none
    assert StorageLocation(url).remove() is True
    assert StorageLocation(url).remove() is False
    assert load_checkpoint(url, "mlp", config.workload_args) is None
