"""Select a workload by name: a built-in (``gpt``) or a user entry point (``pkg.module:build``).

Importing this module is cheap (no torch): the control plane reads :data:`BUILTIN_WORKLOADS` to
validate job specs, and only the worker resolves a builder, which imports the model code.
"""

from __future__ import annotations

import importlib
from typing import Any

from workers.workloads.base import Builder, Workload, WorkloadError, no_batches

__all__ = ["BUILTIN_WORKLOADS", "build_workload", "is_entry_point", "resolve_builder"]

BUILTIN_WORKLOADS: tuple[str, ...] = ("mlp", "cnn", "gpt", "infer", "images")

# Built-in name -> module holding its ``build`` function, imported on first use.
_BUILTIN_MODULES: dict[str, str] = {name: f"workers.workloads.{name}" for name in BUILTIN_WORKLOADS}


def is_entry_point(name: str) -> bool:
    """Whether ``name`` has the ``module:function`` form of a user workload."""
    return ":" in name


def resolve_builder(name: str) -> Builder:
    """Return the builder function for a built-in name or a ``module:function`` entry point.

    Raises:
        WorkloadError: an unknown built-in name (the message lists the valid ones), a module
            that fails to import, or a function that does not exist or is not callable.
    """
    if not is_entry_point(name):
        if name not in _BUILTIN_MODULES:
            raise WorkloadError(
                f"unknown workload {name!r}; built-in workloads are: "
                f"{', '.join(BUILTIN_WORKLOADS)} "
                "(or give a user entry point 'package.module:function')"
            )
        module_name, attr = _BUILTIN_MODULES[name], "build"
    else:
        module_name, _, attr = name.partition(":")
        if not module_name or not attr or ":" in attr:
            raise WorkloadError(
                f"workload entry point {name!r} must have the form 'package.module:function'"
            )
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # a user module can fail in any way while importing
        raise WorkloadError(
            f"workload {name!r}: cannot import module {module_name!r}: {type(exc).__name__}: {exc}"
        ) from exc
    builder = getattr(module, attr, None)
    if not callable(builder):
        found = "is not callable" if builder is not None else "does not exist"
        raise WorkloadError(f"workload {name!r}: {module_name}.{attr} {found}")
    return builder


def build_workload(name: str, args: dict[str, Any], seed: int) -> Workload:
    """Resolve ``name`` and build its workload for ``args`` and ``seed``.

    Raises:
        WorkloadError: the name cannot be resolved, the builder raised, or it returned
            something other than a :class:`Workload`.
    """
    builder = resolve_builder(name)
    try:
        workload = builder(dict(args), seed)
    except WorkloadError:
        raise
    except Exception as exc:  # a user builder can fail in any way; say which workload did
        raise WorkloadError(
            f"workload {name!r} failed to build: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(workload, Workload):
        raise WorkloadError(
            f"workload {name!r}: the builder must return workers.workloads.base.Workload, "
            f"got {type(workload).__name__}"
        )
    _check_data(name, workload, seed)
    return workload


def _check_data(name: str, workload: Workload, seed: int) -> None:
    """Exactly one data source: ``make_batch``, or a map-style ``dataset`` (then
    ``make_batch`` is derived from it, so every reader of one batch sees the loader's data)."""
    ds = workload.dataset
    if (workload.make_batch is no_batches) == (ds is None):
        raise WorkloadError(
            f"workload {name!r}: give exactly one of make_batch and dataset (a map-style "
            "dataset with __len__ and __getitem__)"
        )
    if ds is None:
        return
    try:
        size = len(ds)
    except Exception as exc:  # a user dataset can fail in any way
        raise WorkloadError(
            f"workload {name!r}: the dataset has no length: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(size, int) or size < 1 or not hasattr(ds, "__getitem__"):
        raise WorkloadError(
            f"workload {name!r}: the dataset must be map-style (__getitem__) and not empty, "
            f"got {size!r} samples"
        )
    from workers.loader import dataset_batches  # imports torch: the worker's side only

    workload.make_batch = dataset_batches(ds, seed)
