"""Each integration on the pool (issue 38): the four kinds of script a team already has (a
torchrun script unchanged, a plain loop with ``job.prepare``, a Hugging Face ``Trainer``, a
Lightning module) submitted as command jobs, the examples themselves, to one pool (the
scheduler, the session's Ray cluster, real Redis), side by side: each ends finished, its steps
and throughput reach the store (the step hook's for the two that never call ``orch``, the
callbacks' tokens for the other two), and the run's settings reach the framework's own
objects, as each example's last line prints them (the Trainer's arguments, the Lightning
trainer's precision and accumulation, the wrapped model's class, the loader's batch).

Tiny runs, no tuning (the tuner's path for a command job is tests/e2e/test_command.py's): the
run settings differ from each script's own defaults, so the line shows they arrived. What the
integrations do in depth (resume to the same loss, the global batch kept, a crash's last
output, a missing framework naming its extra) is tested through the worker's runner in
tests/workers/test_command_torchrun.py, test_command_prepared.py, test_integration_hf.py and
test_integration_lightning.py.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.spec import parse_spec
from orchestrator.store.states import JobState
from orchestrator.workdir import pack
from tests.e2e.conftest import ROOT, Orch, start_orch

pytest.importorskip("transformers", reason="the [hf] extra (make test installs it)")
pytest.importorskip("lightning", reason="the [lightning] extra (make test installs it)")

EXAMPLES = ROOT / "examples"
DONE = {JobState.FINISHED, JobState.FAILED}
STEPS = 6

# each example's job file, changed to a tiny run whose settings are not the script's own
JOBS: dict[str, dict[str, Any]] = {
    "torchrun_script": {
        "command": ["python", "train.py", "--steps", str(STEPS), "--batch-size", "16"],
        "run": {"micro_batch": 16, "grad_accum": 1},
        "gpus": 2,
    },
    "prepared_loop": {  # the script's loader: 32 a batch, one rank
        "command": ["python", "train.py"],
        "run": {"micro_batch": 8, "grad_accum": 2, "precision": "bf16"},
        "gpus": 2,
    },
    "hf_causal_lm": {  # the script's arguments: 16 x 1, fp32
        "command": ["python", "train.py", "--lines", "400"],
        "run": {"micro_batch": 8, "grad_accum": 2, "precision": "bf16"},
        "gpus": 1,
    },
    "lightning_module": {  # the script's module: 16 a batch, fp32
        "command": ["python", "train.py", "--lines", "300"],
        "run": {"micro_batch": 8, "grad_accum": 2, "precision": "bf16"},
        "gpus": 1,
    },
}
PRINTED = {
    "torchrun_script": r"\(world size 2\)",
    "prepared_loop": r"\(DistributedDataParallel, batch 8\)",
    "hf_causal_lm": r"\(batch 8 x 2, bf16 True\)",
    "lightning_module": r"\(batch 8 x 2, precision bf16-mixed\)",
}
"""What each example's last line says its framework ran with."""


@pytest.fixture
def pool(ray_cluster: Any, redis_url: str, namespace: str) -> Iterator[Orch]:
    """A ``gang`` scheduler whose data (the jobs' checkpoint folders, where the Trainers
    write) is outside pytest's temporary tree, which a pytest session started beside this one
    makes 0700 (see tests/e2e/test_command.py)."""
    data = Path(tempfile.mkdtemp(prefix="orch-e2e-integrations-"))
    o = start_orch(ray_cluster.address, redis_url, namespace, data)
    yield o
    o.running.shutdown()
    o.store.delete_namespace()
    shutil.rmtree(data, ignore_errors=True)


def submit(o: Orch, example: str) -> str:
    """The example's own job file with :data:`JOBS`' changes, its folder stored."""
    folder = EXAMPLES / example
    job = yaml.safe_load((folder / "job.yaml").read_text())
    change = JOBS[example]
    job["workload"].update(
        command=change["command"], working_dir=o.store.working_dirs.put(pack(folder).data)
    )
    job["resources"] = {"gpus": change["gpus"]}
    job["run"] = {**job["run"], **change["run"], "steps": STEPS, "warmup_steps": 2}
    job["run"].pop("checkpoint_every", None)
    job.pop("tuning", None)
    return o.store.submit(parse_spec(job)).id


@pytest.mark.timeout(300)
def test_each_integration_runs_on_the_pool_measured_with_its_settings(pool: Orch) -> None:
    o = pool
    ids = {example: submit(o, example) for example in JOBS}  # 6 GPU slots: all at once
    for example, job_id in ids.items():
        rec = o.wait(job_id, DONE, timeout_s=240)
        lines = [e.line for e in o.store.logs.tail(job_id, rank=0)]
        assert rec.state is JobState.FINISHED, (example, rec.message, lines[-20:])
        assert rec.result is not None and rec.result["steps_done"] == STEPS, (example, rec)
        change = JOBS[example]
        run = change["run"]
        global_batch = run["micro_batch"] * run["grad_accum"] * change["gpus"]
        assert rec.result["global_batch"] == global_batch, (example, rec.result)
        metrics = o.store.metrics(job_id)
        assert metrics["status"] == "finished" and metrics["samples_per_s"] > 0, metrics
        assert metrics["p50_ms"] > 0 and int(metrics["step"]) == STEPS, (example, metrics)
        if example in ("hf_causal_lm", "lightning_module"):  # seq_len given: tokens counted
            assert metrics["tokens_per_s"] > 0, (example, metrics)
        final = [line for line in lines if line.startswith("final loss ")]
        assert len(final) == 1, (example, lines[-20:])
        assert re.search(PRINTED[example], final[0]), (example, final)
