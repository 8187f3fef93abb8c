"""Holds ``ctx.settings["mb"]`` MiB (written, so resident) through its steps: a run whose
peak memory is known (the tests' use)."""

from workers import job

ctx = job.context()
held = b"\x01" * (int(ctx.settings.get("mb", 0)) << 20)
for _ in range(ctx.steps or 3):
    job.report(samples=ctx.global_batch)
