"""The data loader's knobs, as one value: what the harness builds a workload's loader with.

No torch here: the control plane validates job specs and shapes the tuner's search space with
it. A :class:`LoaderSettings` travels to workers as a plain dict (``HarnessConfig.loader``) and
stands in a tuner ``Config`` as one short canonical string (:meth:`LoaderSettings.token`), so a
trial's loader is one categorical value for Optuna and one column of the trials table.

The knobs are PyTorch ``DataLoader``'s (see its documentation) plus a RAM cache:

- ``num_workers``: processes decoding samples beside the training process (0: in the step's
  own process, between steps).
- ``prefetch_factor``: micro-batches each worker keeps ready ahead of the step (workers only).
- ``pin_memory``: page-locked host buffers, so the copy to a CUDA device can overlap compute
  (no effect on a CPU device).
- ``persistent_workers``: keep the workers between epochs instead of starting new ones.
- ``cache_mb``: a RAM cache of decoded samples shared by the workers (0: none); as many
  samples as fit, the lowest dataset indices first.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from workers.errors import HarnessConfigError

__all__ = ["DEFAULT_TOKEN", "MAX_CACHE_MB", "MAX_PREFETCH", "MAX_WORKERS", "LoaderSettings"]

MAX_WORKERS = 64
MAX_PREFETCH = 64
MAX_CACHE_MB = 1 << 20  # 1 TiB: more is a typo, not a machine

# token field names, in canonical order
_SHORT = {
    "num_workers": "workers",
    "prefetch_factor": "prefetch",
    "pin_memory": "pin",
    "persistent_workers": "persistent",
    "cache_mb": "cache_mb",
}


@dataclass(frozen=True, order=True)
class LoaderSettings:
    """How the harness loads a workload's dataset (see the module doc for each knob).

    Raises:
        HarnessConfigError: a value out of range or a knob that needs workers without them
            (``persistent_workers`` with ``num_workers`` 0; torch refuses it too).
    """

    num_workers: int = 0
    prefetch_factor: int = 2
    pin_memory: bool = False
    persistent_workers: bool = False
    cache_mb: int = 0

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise HarnessConfigError("invalid loader settings: " + "; ".join(problems))

    def problems(self) -> list[str]:
        """What is wrong with these settings, one message per problem (empty: nothing)."""
        p: list[str] = []
        ranges = {
            "num_workers": (0, MAX_WORKERS),
            "prefetch_factor": (1, MAX_PREFETCH),
            "cache_mb": (0, MAX_CACHE_MB),
        }
        for name, (lo, hi) in ranges.items():
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                p.append(f"loader.{name} must be an integer in [{lo}, {hi}], got {v!r}")
        for name in ("pin_memory", "persistent_workers"):
            if not isinstance(getattr(self, name), bool):
                p.append(f"loader.{name} must be true or false, got {getattr(self, name)!r}")
        if self.persistent_workers is True and self.num_workers == 0:
            p.append("loader.persistent_workers needs num_workers > 0 (there are no workers)")
        return p

    def to_dict(self) -> dict[str, Any]:
        """The settings as plain JSON data (``from_dict``'s inverse)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> LoaderSettings:
        """Settings from a dict (missing keys: defaults).

        Raises:
            HarnessConfigError: an unknown key or a bad value.
        """
        data = dict(data or {})
        unknown = sorted(set(data) - set(_SHORT))
        if unknown:
            raise HarnessConfigError(
                f"unknown loader settings {unknown}; allowed: {', '.join(_SHORT)}"
            )
        return cls(**data)

    def token(self) -> str:
        """The canonical one-line form, ``workers=4,prefetch=2,pin=0,persistent=1,cache_mb=0``
        (every knob, in a fixed order: equal settings have equal tokens)."""
        return ",".join(f"{_SHORT[k]}={int(v)}" for k, v in dataclasses.asdict(self).items())

    @classmethod
    def from_token(cls, token: str) -> LoaderSettings:
        """The settings :meth:`token` wrote.

        Raises:
            HarnessConfigError: not a token of this form.
        """
        long = {short: name for name, short in _SHORT.items()}
        data: dict[str, Any] = {}
        for part in token.split(","):
            key, _, value = part.partition("=")
            if key not in long or not value.isdigit():
                raise HarnessConfigError(f"not a loader token: {token!r}")
            name = long[key]
            data[name] = (
                bool(int(value)) if name in ("pin_memory", "persistent_workers") else int(value)
            )
        return cls(**data)

    def describe(self) -> str:
        """A short human form: ``4 workers, prefetch 2, pinned, persistent, cache 512 MB``."""
        parts = [f"{self.num_workers} workers" if self.num_workers else "no workers"]
        if self.num_workers:
            parts.append(f"prefetch {self.prefetch_factor}")
        if self.pin_memory:
            parts.append("pinned")
        if self.persistent_workers:
            parts.append("persistent")
        if self.cache_mb:
            parts.append(f"cache {self.cache_mb} MB")
        return ", ".join(parts)


DEFAULT_TOKEN = LoaderSettings().token()
