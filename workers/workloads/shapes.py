"""The shapes of the built-in models, computed from a workload's arguments (no torch here).

The control plane checks a job's parallel plan against its model at submission
(:func:`workers.parallel.plan.split_problems`) and the tuner prices its memory per rank
(``orchestrator.tuner.planmodel.state_bytes``), neither of which may build the model: the
light client has no torch, and a model that does not fit the control plane's memory is what
the check is for. So each built-in's arguments and parameter count live here, beside the
tensor-parallel split of ``gpt``; the builders read their defaults from here, and
tests/workers/test_shapes.py holds each count to the built model's (``recipe.shape_of``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from workers.errors import WorkloadError
from workers.parallel.plan import ModelShape
from workers.workloads.base import require_positive, take_args

__all__ = ["GPT_DEFAULTS", "GPT_TP", "MLP_DEFAULTS", "builtin_shape"]

GPT_DEFAULTS: dict[str, Any] = {
    "n_layer": 2,
    "d_model": 64,
    "n_head": 4,
    "seq_len": 64,
    "vocab": 256,
}
MLP_DEFAULTS: dict[str, Any] = {
    "in_features": 32,
    "hidden": 64,
    "n_layer": 2,
    "classes": 10,
    "pace_ms": 0.0,
}

# Megatron-LM's split of a pre-LN block: q, k, v and the MLP's first linear column-wise, the
# attention output and the MLP's second linear row-wise: two all-reduces per block forward.
GPT_TP: dict[str, str] = {
    "attn.q": "colwise",
    "attn.k": "colwise",
    "attn.v": "colwise",
    "attn.proj": "rowwise",
    "mlp.0": "colwise",
    "mlp.2": "rowwise",
}


def _gpt(args: Mapping[str, Any]) -> ModelShape:
    a = take_args("gpt", args, GPT_DEFAULTS)
    require_positive("gpt", a, list(GPT_DEFAULTS))
    n, d, h = a["n_layer"], a["d_model"], a["n_head"]
    if d % h:
        raise WorkloadError(f"workload 'gpt': d_model {d} must be divisible by n_head {h}")
    # a block: two LayerNorms (2d each), q, k, v and proj (d^2 + d each), the MLP's d -> 4d
    # (4d^2 + 4d) and 4d -> d (4d^2 + d); around them the token and position embeddings, the
    # final LayerNorm and the bias-free head
    block = 12 * d * d + 13 * d
    params = a["vocab"] * d + a["seq_len"] * d + n * block + 2 * d + d * a["vocab"]
    widths = {path: (4 * d if path.startswith("mlp") else d) for path in GPT_TP}
    return ModelShape(blocks=n, heads=h, widths=widths, params=params)


MAX_PACE_MS = 10_000.0
"""The most ``mlp``'s ``pace_ms`` may delay each micro-batch's data (milliseconds)."""


def _mlp(args: Mapping[str, Any]) -> ModelShape:
    a = take_args("mlp", args, MLP_DEFAULTS)
    require_positive("mlp", a, ["in_features", "hidden", "classes"])
    if not 0 <= a["pace_ms"] <= MAX_PACE_MS:
        raise WorkloadError(
            f"workload 'mlp': argument 'pace_ms' must be in 0 .. {MAX_PACE_MS:g}, "
            f"got {a['pace_ms']!r}"
        )
    i, h, c = a["in_features"], a["hidden"], a["classes"]
    return ModelShape(params=i * h + h + a["n_layer"] * (h * h + h) + h * c + c)


_SHAPES: dict[str, Callable[[Mapping[str, Any]], ModelShape]] = {"gpt": _gpt, "mlp": _mlp}
# built-ins with no layout whose parameters are not counted here (no memory filter for them)
_NO_LAYOUT = ("cnn", "images")


INFER_MODELS = ("gpt", "mlp")
"""The models ``infer`` serves (its ``model`` argument; the rest are that model's)."""


def check_args(name: str, args: Mapping[str, Any]) -> None:
    """Refuse arguments built-in ``name`` would refuse at start, where that needs no torch:
    unknown names, wrong types, sizes and ranges of ``mlp``, ``gpt`` and ``infer`` (so a job
    with a typo is refused at submission, not failed once it runs). ``cnn`` and ``images``
    are checked by their builders when the run starts.

    Raises:
        WorkloadError: what is wrong, naming the argument and what is allowed.
    """
    if name == "infer":
        rest = dict(args)
        model = rest.pop("model", "gpt")
        if model not in INFER_MODELS:
            raise WorkloadError(
                f"workload 'infer': model must be one of {', '.join(INFER_MODELS)}, got {model!r}"
            )
        name, args = str(model), rest
    shape = _SHAPES.get(name)
    if shape is not None:
        shape(args)


def builtin_shape(name: str, args: Mapping[str, Any]) -> ModelShape | None:
    """The shape of built-in workload ``name`` built with ``args``; ``None`` when unknown here
    (``infer``, a user entry point) or when the arguments are not ones it builds with (which
    :func:`check_args` refuses at submission)."""
    if name in _NO_LAYOUT:
        return ModelShape()
    shape = _SHAPES.get(name)
    if shape is None:
        return None
    try:
        return shape(args)
    except WorkloadError:
        return None
