"""The job file: pydantic models validated once, at the edge.

A job file (YAML or JSON) becomes a :class:`JobSpec`, or a :class:`SpecError` listing every
problem with the field's dotted path and what is allowed. Inside the orchestrator the spec is
trusted. See docs/user-guide.md ("Job file") for the format and docs/reference/job-file.md
(generated from these models by docs/generate.py) for every field.

One module per section of the file: ``workload.py``, ``sla.py``, ``run.py`` (``resources:``
and ``run:``), ``serving.py`` (``serve:``), ``tuning.py``; ``job.py`` is the whole job and the
checks that span sections; ``load.py`` reads a file or document into it; ``base.py`` holds the
strict base model, shared types and bounds. The names this package exports are the public
input API.
"""

from __future__ import annotations

from orchestrator.inputs import NAME_PATTERN  # for orchestrator.api, store.tokens
from orchestrator.spec.base import JobClass, LRScaling, Precision, Sharding
from orchestrator.spec.job import JobSpec
from orchestrator.spec.load import load_spec, parse_spec, spec_from_document
from orchestrator.spec.run import GPURange, PlanSettings, Resources, RunSettings
from orchestrator.spec.serving import ServeSpec
from orchestrator.spec.sla import SLA, LatencySLA, ThroughputSLA
from orchestrator.spec.tuning import IntRange, PlanBounds, Tuning, TuningBounds, TuningBudget
from orchestrator.spec.workload import ScriptSetting, WorkloadRef, command_program_allowed

__all__ = [
    "NAME_PATTERN",
    "SLA",
    "GPURange",
    "IntRange",
    "JobClass",
    "JobSpec",
    "LRScaling",
    "LatencySLA",
    "PlanBounds",
    "PlanSettings",
    "Precision",
    "Resources",
    "RunSettings",
    "ScriptSetting",
    "ServeSpec",
    "Sharding",
    "ThroughputSLA",
    "Tuning",
    "TuningBounds",
    "TuningBudget",
    "WorkloadRef",
    "command_program_allowed",
    "load_spec",
    "parse_spec",
    "spec_from_document",
]
