"""Workloads: the models the harness runs, built-in or supplied by users.

See ``README.md`` in this folder for the protocol. Nothing here imports torch; the built-in
modules (``mlp``, ``cnn``, ``gpt``, ``infer``) do and are imported only when resolved.
"""

from __future__ import annotations

from workers.workloads.base import Batch, Builder, Workload, WorkloadError
from workers.workloads.registry import BUILTIN_WORKLOADS, build_workload, resolve_builder

__all__ = [
    "BUILTIN_WORKLOADS",
    "Batch",
    "Builder",
    "Workload",
    "WorkloadError",
    "build_workload",
    "resolve_builder",
]
