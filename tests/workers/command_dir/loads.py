"""Reads its batches through ``job.loader`` from a source that takes 30 ms a batch, shared
by the loader workers ``ctx.dataloader_kwargs`` gives it (a stand-in for a ``DataLoader``),
and computes 10 ms a step: a run whose data wait is known (the tests' use). It writes the
loader settings it was given to its checkpoint folder."""

import json
import time
from collections.abc import Iterator
from pathlib import Path

from workers import job

ctx = job.context()
kwargs = ctx.dataloader_kwargs
Path(ctx.checkpoint_dir, "loader.json").write_text(json.dumps(kwargs))


def batches() -> Iterator[list[int]]:
    while True:
        time.sleep(0.03 / (1 + kwargs["num_workers"]))
        yield [0] * ctx.micro_batch


source = job.loader(batches())
for _ in range(ctx.steps or 10):
    next(source)
    time.sleep(0.01)
    job.report(samples=ctx.global_batch)
