"""Tuning a command job (issue 22): the example script (examples/own_script) tuned on its
declared settings through the real tuner path: the study and report in Redis, each trial the
team's script run through ``workers.command`` (sandboxed as its own uid when the tests run as
root, real torch steps), measured from its step reports; a script that crashes or runs out of
memory in a trial is an infeasible trial with its reason; the chosen settings reach the job's
run through its job context. A script that runs out of host memory (the kernel's OOM killer, or
torch's CPU allocator) is pruned as a CUDA OOM is; one that reads its batches through
``job.loader`` gets the loader stage."""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.runtime.harness_config import job_harness_config, run_spec
from orchestrator.spec import JobSpec, parse_spec
from orchestrator.store import JobStore
from orchestrator.tuner.loader_stage import WALL_CLOCK
from orchestrator.tuner.script_space import setting_values
from orchestrator.tuner.service import tune_spec
from orchestrator.tuner.space import Config, DeviceCaps
from orchestrator.workdir import pack
from workers.contain import enforced
from workers.loader_settings import LoaderSettings

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "own_script"
CPU = DeviceCaps(precisions=("fp32",))

# Runs the example unless its settings say to fail: the crash a team's script may have.
CRASHY = """\
import runpy
from workers import job

hidden = job.context().settings["hidden"]
if hidden == 64:
    raise RuntimeError("hidden 64 is not supported by this script")
if hidden == 128:
    raise MemoryError("no room for hidden 128")
runpy.run_path("train.py", run_name="__main__")
"""

# Holds 16 MiB per sample of its micro-batch (written, so resident) through its steps.
HUNGRY = """\
from workers import job

ctx = job.context()
held = b"\\x01" * (ctx.micro_batch * 16 << 20)
for _ in range(ctx.steps or 13):
    job.report(samples=ctx.global_batch)
"""
SCRIPTS = ROOT / "tests" / "workers" / "command_dir"


def _spec(
    store: JobStore,
    folder: Path,
    micro_batch: tuple[int, int] = (16, 16),
    resources: dict[str, Any] | None = None,
    **workload: Any,
) -> JobSpec:
    """The example's own job file with tuning on (the run settings narrowed, so the trials
    are about the script's settings), its folder stored as ``orch submit --working-dir``
    stores it."""
    job = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    job["workload"].update(workload, working_dir=store.working_dirs.put(pack(folder).data))
    job["resources"].update(resources or {})
    lo, hi = micro_batch
    job["tuning"] = {
        "enabled": True,
        "bounds": {"micro_batch": {"min": lo, "max": hi}, "precision": ["fp32"]},
    }
    return parse_spec(job)


def _workers(config: Config) -> int:
    return LoaderSettings.from_token(config.loader).num_workers


def _settings(rec: Any) -> tuple[Any, ...]:
    return tuple(sorted(Config.from_dict(rec["config"]).script_settings().items()))


def test_the_example_is_tuned_on_its_declared_settings(store: JobStore, redis_url: str) -> None:
    spec = _spec(store, EXAMPLE)
    report = tune_spec(spec, store, redis_url, job="own-script", caps=CPU)
    table = report.to_dict()["trials_table"]
    measured = [t for t in table if t["source"] == "measured"]

    # every combination of the declared settings' values was run, each a real run of the script
    declared = spec.workload.settings
    values = {name: setting_values(s) for name, s in sorted(declared.items())}
    # threads at its ends; hidden and lr only at their defaults (tune: false: they change
    # what the job learns, which a tuner judging by speed must not choose)
    assert values == {"hidden": (32,), "lr": (0.01,), "threads": (1, 2)}
    combos = {tuple(zip(values, c, strict=True)) for c in itertools.product(*values.values())}
    assert {_settings(t) for t in measured} == combos
    for t in measured:  # on the job's own global batch, measured from the script's steps
        assert t["global_batch"] == 32 and t["measurement"]["status"] == "ok", t
        m = t["measurement"]
        assert m["samples_per_s"] > 0 and m["p95_ms"] >= m["p50_ms"] > 0

    # the chosen config meets the SLA in the trials table, and the job runs with it
    assert report.result.status == "feasible" and report.run
    chosen = report.result.chosen
    assert chosen is not None
    row = next(t for t in measured if Config.from_dict(t["config"]) == chosen.config)
    assert row["feasible"] and row["measurement"]["samples_per_s"] >= 10
    runs = job_harness_config(run_spec(spec, chosen.config.to_dict()))
    assert runs["command"]["settings"] == chosen.config.script_settings()
    assert (runs["micro_batch"], runs["grad_accum"]) == (16, 2)
    stored = store.tune_reports.load("own-script")
    assert stored is not None and stored["config"] == chosen.config.to_dict()


def test_a_script_crashing_in_a_trial_is_an_infeasible_trial(
    store: JobStore, redis_url: str, tmp_path: Path
) -> None:
    folder = tmp_path / "crashy"
    shutil.copytree(EXAMPLE, folder)
    (folder / "crashy.py").write_text(CRASHY)
    spec = _spec(
        store,
        folder,
        command=["python", "crashy.py"],
        settings={"hidden": {"type": "choice", "values": [16, 64, 128], "default": 16}},
    )
    report = tune_spec(spec, store, redis_url, job="crashy", caps=CPU)
    rows = {_settings(t): t for t in report.to_dict()["trials_table"] if t["source"] == "measured"}
    assert set(rows) == {(("hidden", 16),), (("hidden", 64),), (("hidden", 128),)}

    crashed = rows[(("hidden", 64),)]
    assert crashed["measurement"]["status"] == "error" and not crashed["feasible"]
    assert "crashed" in crashed["reason"] and "exited with code 1" in crashed["reason"]
    assert "hidden 64 is not supported" in crashed["reason"]
    oom = rows[(("hidden", 128),)]
    assert oom["measurement"]["status"] == "oom" and "out of memory" in oom["reason"]
    # the tuner went on: the setting that runs is chosen
    assert report.result.status == "feasible" and rows[(("hidden", 16),)]["feasible"]
    assert report.result.chosen is not None
    assert report.result.chosen.config.script_settings() == {"hidden": 16}


@pytest.mark.slow  # a CLI process of its own (imports, embedded checks) beside the trials
def test_orch_tune_takes_the_scripts_folder(
    store: JobStore, redis_url: str, tmp_path: Path
) -> None:
    """``orch tune --working-dir . job.yaml`` from the example's folder: the folder stored,
    the trials run the script from it, the report names its settings."""
    import os
    import subprocess
    import sys

    job = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    job["tuning"] = {"enabled": True, "bounds": {"precision": ["fp32"]}}
    job_file = tmp_path / "job.yaml"
    job_file.write_text(yaml.safe_dump(job))
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "REDIS_URL": redis_url,
        "ORCH_NAMESPACE": store.namespace,
        "ORCH_DATA_DIR": str(tmp_path / "data"),
    }
    orch = Path(sys.executable).parent / "orch"
    args = [str(orch), "tune", "--working-dir", ".", str(job_file), "--trials", "2"]
    out = subprocess.run(args, cwd=EXAMPLE, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "tuning: feasible" in out.stdout and "threads" in out.stdout, out.stdout
    report = store.tune_reports.load("own-script")
    assert report is not None and report["trials"] == 2
    assert set(report["config"]["settings"]) == {"hidden", "lr", "threads"}


@pytest.mark.skipif(
    os.geteuid() != 0 or enforced()["memory"].startswith("not enforced"),
    reason="a memory bound needs a root worker and a cgroup memory controller",
)
def test_a_script_killed_for_its_memory_is_pruned_as_out_of_memory(
    store: JobStore, redis_url: str, tmp_path: Path
) -> None:
    """The real thing, where the host enforces it (as here, as root): each trial's script is
    bounded by the job's ``resources.memory_gb`` (0.2 GB) as its runs are, so at micro-batch
    16 (256 MiB) the kernel's OOM killer ends it; the run's cgroup counted the kill, so the
    trial is ``oom``, and, as after a CUDA OOM, no larger micro-batch with its settings is
    tried. (Torch's CPU allocator failing, the other CPU OOM, is tests/tuner/test_oom.py's and
    test_service.py's.)"""
    folder = tmp_path / "hungry"
    folder.mkdir()
    (folder / "hungry.py").write_text(HUNGRY)
    spec = _spec(
        store,
        folder,
        micro_batch=(8, 32),
        resources={"memory_gb": 0.2},
        command=["python", "hungry.py"],
        settings={},
    )
    report = tune_spec(spec, store, redis_url, job="hungry", caps=CPU)
    rows = [t for t in report.to_dict()["trials_table"] if t["source"] == "measured"]
    by_mb = {t["config"]["micro_batch"]: t for t in rows}
    oom = by_mb[16]
    assert oom["measurement"]["status"] == "oom" and not oom["feasible"], oom
    assert "out of memory" in oom["reason"] and "host memory bound" in oom["reason"]
    assert by_mb[8]["measurement"]["status"] == "ok"
    ooms = [t["config"]["micro_batch"] for t in rows if t["measurement"]["status"] == "oom"]
    assert ooms == sorted(set(ooms), reverse=True)  # nothing at or above an OOM tried again
    assert report.result.chosen is not None and report.result.chosen.config.micro_batch == 8


def test_a_script_waiting_on_its_data_gets_the_loader_stage(
    store: JobStore, redis_url: str
) -> None:
    """tests/workers/command_dir/loads.py waits 30 ms a batch in ``job.loader`` over the
    loader workers its context gives it, and computes 10 ms: its data wait is measured, most
    of its step, so the loader stage profiles other loader settings, the script reads them
    from ``ctx.dataloader_kwargs``, and one with workers wins at the wall clock."""
    spec = _spec(store, SCRIPTS, command=["python", "loads.py"], settings={})
    report = tune_spec(spec, store, redis_url, job="loads", caps=CPU)
    rows = [t for t in report.to_dict()["trials_table"] if t["source"] == "measured"]
    first = [t for t in rows if t["measurement"]["message"] != WALL_CLOCK]
    assert first and all(t["measurement"]["data_wait_share"] >= 0.5 for t in first), first
    staged = [t for t in rows if t["measurement"]["message"] == WALL_CLOCK]
    loaders = {_workers(Config.from_dict(t["config"])) for t in staged}
    assert {0, 1} <= loaders, loaders  # the job's own among them, judged alike
    chosen = report.result.chosen
    assert chosen is not None and _workers(chosen.config) >= 1
    runs = job_harness_config(run_spec(spec, chosen.config.to_dict()))
    assert runs["loader"]["num_workers"] >= 1  # what the job's script reads in its runs
