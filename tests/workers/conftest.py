"""Fixtures shared by the worker tests."""

from __future__ import annotations

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
