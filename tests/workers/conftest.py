"""Fixtures shared by the worker tests."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    # Two cores are shared with other test processes; one thread avoids oversubscription and
    # keeps float reductions in one order. Restored so other packages' tests are unaffected.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True, scope="session")
def _datasets_in_the_session_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    # The images workload writes its dataset once per folder: here, under this session's
    # temporary folder rather than the user's shared one (and reused by the session's tests).
    before = os.environ.get("ORCH_DATASETS")
    os.environ["ORCH_DATASETS"] = str(tmp_path_factory.mktemp("datasets"))
    yield
    if before is None:
        os.environ.pop("ORCH_DATASETS", None)
    else:
        os.environ["ORCH_DATASETS"] = before
