"""A command job's own settings as dimensions of its search space.

A command job's script declares the settings the tuner may search (``workload.settings``:
an ``int`` or ``float`` range, or a ``choice`` of values; see ``orchestrator.spec``). The
strategies walk a space of discrete points (ladders, lines, families), so a range is tried
at a few values: its ends and its default, and, when the default is an end, the midpoint
between them (geometric for a positive range spanning a factor of ten or more, as a learning
rate's does; arithmetic otherwise). A choice is tried at each of its values. Every
combination of them is a family of its own for the strategies (a setting such as a layer's
width changes the step's time and memory). A setting declared ``tune: false`` is applied at its
default and never searched: the tuner judges configs by the SLA (time, cost), which says
nothing of what a learning rate does to the loss.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.spec import JobSpec, ScriptSetting

__all__ = ["script_dimensions", "setting_values"]


def setting_values(setting: ScriptSetting) -> tuple[Any, ...]:
    """The values a setting is tried at (see the module doc), in order; only its default
    when the job says the tuner may not search it (``tune: false``)."""
    if not setting.tune:
        return (setting.default,)
    if setting.type == "choice":
        return tuple(dict.fromkeys(setting.values or ()))
    assert setting.min is not None and setting.max is not None  # the spec's rule
    lo, hi = setting.min, setting.max
    geometric = lo > 0 and hi >= 10 * lo
    mid = math.sqrt(lo * hi) if geometric else (lo + hi) / 2
    if setting.type == "int":
        values: set[Any] = {math.ceil(lo), math.floor(hi), int(setting.default)}
        mid_value: Any = round(mid)
    else:
        values = {float(lo), float(hi), float(setting.default)}
        mid_value = float(f"{mid:.3g}")
    if setting.default in (lo, hi):
        values.add(mid_value)
    return tuple(sorted(values))


def script_dimensions(spec: JobSpec) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """A command job's settings as ``SearchSpace.settings``: by name, each with its values as
    JSON text (empty for a workload the harness runs)."""
    if spec.workload.command is None:
        return ()
    return tuple(
        (name, tuple(json.dumps(v) for v in setting_values(s)))
        for name, s in sorted(spec.workload.settings.items())
    )
