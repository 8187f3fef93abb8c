"""Command mode in the job file: a command, its working directory and its own settings."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.errors import SpecError
from orchestrator.runtime.harness_config import job_harness_config
from orchestrator.spec import load_spec, parse_spec
from tests.orchestrator.test_workdir import EXAMPLE

DIGEST = "sha256:" + "a" * 64


def _job(workload: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {
        "name": "own",
        "team": "t",
        "class": "bulk",
        "workload": workload,
        "sla": {"throughput": {"min_samples_per_s": 1}},
        "run": {"steps": 5},
        **more,
    }


def test_a_command_job_carries_its_settings_to_the_worker_config() -> None:
    spec = parse_spec(
        _job(
            {
                "command": ["python", "train.py", "--fast"],
                "working_dir": DIGEST,
                "settings": {
                    "hidden": {"type": "int", "min": 8, "max": 64, "default": 16},
                    "act": {"type": "choice", "values": ["relu", "gelu"], "default": "gelu"},
                },
                "first_report_s": 30,
            }
        )
    )
    assert spec.workload.ref == "python train.py --fast"
    cfg = job_harness_config(spec)
    assert cfg["command"] == {
        "argv": ["python", "train.py", "--fast"],
        "settings": {"hidden": 16, "act": "gelu"},
        "first_report_s": 30,
        "working_dir": DIGEST,
    }


@pytest.mark.parametrize(
    ("workload", "more", "problem"),
    [
        *(
            (
                {"command": ["./run.sh"], "working_dir": DIGEST},
                {"tuning": {"enabled": True, **more}},
                field,
            )
            for more, field in (  # what a script cannot take from the tuner, by its field
                # (sharding, checkpointing and compile it may: job.prepare applies them)
                ({"bounds": {"plan": {"tp": [2]}}}, "tuning.bounds.plan"),
                (
                    {"bounds": {"global_batch": {"min": 8, "max": 64}, "lr_scaling": "linear"}},
                    "tuning.bounds.global_batch",
                ),
                ({"objective": "energy"}, "tuning.objective 'energy'"),
            )
        ),
        ({"command": ["tools/../../x"], "working_dir": DIGEST}, {}, "is not allowed"),
        ({"command": ["bash"], "working_dir": DIGEST}, {}, "'bash' is not allowed"),
        ({"command": ["python"], "working_dir": DIGEST, "first_report_s": 0}, {}, "first_report_s"),
        ({"name": "mlp", "working_dir": DIGEST}, {}, "go with command only"),
        (
            {
                "command": ["python"],
                "working_dir": DIGEST,
                "settings": {"n": {"type": "int", "default": 3}},
            },
            {},
            "gives min and max",
        ),
        (
            {
                "command": ["python"],
                "working_dir": DIGEST,
                "settings": {"n": {"type": "int", "min": 1, "max": 9, "default": 2.5}},
            },
            {},
            "default must be an integer",
        ),
    ],
)
def test_bad_command_jobs_are_refused_naming_the_field(
    workload: dict[str, Any], more: dict[str, Any], problem: str
) -> None:
    with pytest.raises(SpecError, match=problem):
        parse_spec(_job(workload, **more))


def test_the_work_of_a_command_job_is_not_counted_in_tokens() -> None:
    job = _job({"command": ["python", "t.py"], "working_dir": DIGEST})
    job["sla"] = {"throughput": {"work_tokens": 1000, "deadline_s": 60}}
    del job["run"]
    with pytest.raises(SpecError, match="work_tokens: a command job states its work in samples"):
        parse_spec(job)


def test_load_spec_gives_a_command_job_the_submitted_working_dir() -> None:
    spec = load_spec(EXAMPLE / "job.yaml", working_dir=DIGEST)
    assert spec.workload.working_dir == DIGEST
    assert set(spec.workload.settings) == {"hidden", "lr", "threads"}
    with pytest.raises(SpecError, match="needs its working directory"):
        load_spec(EXAMPLE / "job.yaml")


def test_a_command_job_may_be_tuned_on_what_its_script_reads() -> None:
    bounds = {
        "micro_batch": {"min": 2, "max": 16},
        "precision": ["fp32", "bf16"],
        "compile": [False],
        "sharding": ["ddp"],
    }
    job = _job(
        {"command": ["python", "t.py"], "working_dir": DIGEST},
        tuning={"enabled": True, "bounds": bounds},
    )
    assert parse_spec(job).tuning.enabled
