"""The image builds from deploy/Dockerfile where a container builder is present.

``deploy/build-images.sh`` picks docker (its daemon answering), podman or buildah. Where none is
usable the build test skips and says why (this is the case on machines without a container
runtime; no builder is installed by the test suite). Only the ``orchestrator`` target is built
here: the ``ray`` target starts from Ray's CUDA image, several gigabytes to pull.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "build-images.sh"
TAG = "0.0.0-test"


@functools.cache
def builder() -> tuple[str | None, str]:
    """(the builder's name or None, what the script said)."""
    out = subprocess.run(
        [str(SCRIPT), "--which"], capture_output=True, text=True, timeout=60, check=False
    )
    said = out.stdout.strip()
    if out.returncode == 3:
        return None, said
    assert out.returncode == 0, out.stderr
    return said, said


def test_the_script_names_a_builder_or_says_why_not() -> None:
    name, said = builder()
    assert name in ("docker", "podman", "buildah") or said.startswith("no container builder: ")


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_orchestrator_image_builds(tmp_path: Path) -> None:
    name, said = builder()
    if name is None:
        pytest.skip(f"the image is not built here: {said}")
    env = {**os.environ, "TARGETS": "orchestrator"}
    out = subprocess.run(
        [str(SCRIPT), "orch-test", TAG], capture_output=True, text=True, timeout=1700, env=env
    )
    assert out.returncode == 0, out.stderr[-4000:]
    if name in ("docker", "podman"):  # the entry point works in the image
        image = f"orch-test/sla-orchestrator:{TAG}"
        run = subprocess.run(
            [name, "run", "--rm", image, "orch", "--help"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stderr
        subprocess.run([name, "rmi", image], capture_output=True, timeout=120, check=False)
