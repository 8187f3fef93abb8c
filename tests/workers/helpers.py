"""Tiny harness configurations shared by the worker tests: every step runs in milliseconds."""

from __future__ import annotations

from typing import Any

from workers.config import HarnessConfig

# Tiny models: every step stays in the low milliseconds on one CPU thread.
TINY_ARGS: dict[str, dict[str, Any]] = {
    "mlp": {"in_features": 16, "hidden": 32, "n_layer": 2},
    "cnn": {"channels": 4, "n_layer": 2, "image_size": 16},
    "gpt": {"n_layer": 2, "d_model": 32, "n_head": 2, "seq_len": 16, "vocab": 64},
    "images": {"images": 32, "image_size": 16, "channels": 4, "n_layer": 1},
    "infer": {"model": "gpt", "n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 16, "vocab": 64},
}


def tiny(workload: str, **overrides: Any) -> HarnessConfig:
    """A HarnessConfig for a tiny version of a built-in workload."""
    fields: dict[str, Any] = {
        "workload": workload,
        "workload_args": TINY_ARGS.get(workload, {}),
        "micro_batch": 4,
        "steps": 3,
        "warmup_steps": 1,
    }
    fields.update(overrides)
    return HarnessConfig(**fields)
