"""A parallel plan: how many ranks on each axis, and how the data axis shards (no torch here).

A job on ``dp x tp x pp`` ranks splits each optimizer step's batch over ``dp`` data-parallel
replicas; each replica is ``pp`` pipeline stages (consecutive blocks; the step's micro-batches
flow through them, GPipe), and each stage's linear layers are split over ``tp`` ranks
(Megatron-LM). On the data axis ``zero`` says what is sharded over the ``dp`` replicas
(Rajbhandari et al., "ZeRO", SC 2020):

- 0: nothing (DistributedDataParallel: whole model, all-reduced gradients);
- 1: optimizer state (``torch.distributed.optim.ZeroRedundancyOptimizer`` beside DDP);
- 2: optimizer state and gradients (FSDP2 ``fully_shard(reshard_after_forward=False)``: the
  parameters gathered for the forward stay whole until the backward is done);
- 3: optimizer state, gradients and parameters (FSDP2, each block gathered only while it
  runs); ``offload`` keeps the shards and the optimizer step in host memory (CUDA only: on a
  CPU they are there already).

A plan never changes what a job learns: its global batch is ``micro_batch x grad_accum x dp``
whatever ``tp`` and ``pp`` are, and every rank of one replica reads that replica's data.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = ["ZERO_STAGES", "Plan"]

ZERO_STAGES: tuple[int, ...] = (0, 1, 2, 3)
_FIELDS = ("dp", "tp", "pp", "zero", "offload")


@dataclass(frozen=True, order=True)
class Plan:
    """Degrees of the three axes, the ZeRO stage of the data axis, and CPU offload.

    With one data-parallel replica there is nothing to shard: ``zero`` is then 0 (normalised
    on construction, so equal runs have equal plans). Use :meth:`problems` to validate.
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1
    zero: int = 0
    offload: bool = False

    def __post_init__(self) -> None:
        if self.dp == 1 and not self.offload and self.zero in ZERO_STAGES:
            object.__setattr__(self, "zero", 0)

    @property
    def world(self) -> int:
        """Ranks the plan needs: ``dp x tp x pp``."""
        return self.dp * self.tp * self.pp

    def problems(
        self, *, world: int | None = None, n_blocks: int | None = None, where: str = "plan"
    ) -> list[str]:
        """What is wrong with the plan, one message per problem, each naming its field.

        Args:
            world: the ranks (GPUs) the job runs on, when known: the degrees must multiply to it.
            n_blocks: the model's blocks, when known: ``pp`` must divide them.
            where: the prefix of field names in messages (``run.plan`` in a job file).
        """
        p: list[str] = []
        for name in ("dp", "tp", "pp"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                p.append(f"{where}.{name} must be an integer >= 1, got {v!r}")
        if self.zero not in ZERO_STAGES or isinstance(self.zero, bool):
            p.append(f"{where}.zero must be one of 0, 1, 2, 3, got {self.zero!r}")
        if not isinstance(self.offload, bool):
            p.append(f"{where}.offload must be true or false, got {self.offload!r}")
        if p:
            return p
        if self.offload and (self.zero != 3 or self.dp < 2):
            p.append(
                f"{where}.offload needs zero 3 on dp >= 2 (offload moves FSDP's shards to host "
                f"memory), got zero {self.zero} on dp {self.dp}"
            )
        if self.dp > 1 and self.zero < 2 and (self.tp > 1 or self.pp > 1):
            p.append(
                f"{where}.zero must be 2 or 3 when dp > 1 is combined with tp or pp > 1 (zero 0 "
                f"and 1 run DDP, which spans the data axis of a 1-D plan only), got zero "
                f"{self.zero} with tp {self.tp}, pp {self.pp}"
            )
        if world is not None and self.world != world:
            p.append(
                f"{where}: dp x tp x pp must equal the GPU count {world}, got "
                f"{self.dp} x {self.tp} x {self.pp} = {self.world}"
            )
        if n_blocks is not None and n_blocks % self.pp:
            p.append(f"{where}.pp must divide the model's {n_blocks} blocks, got {self.pp}")
        return p

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (the inverse of :meth:`from_dict`)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        """A plan from a dict of its fields (unknown keys are an error: a typo would otherwise
        silently run another plan).

        Raises:
            ValueError: an unknown key.
        """
        unknown = sorted(set(data) - set(_FIELDS))
        if unknown:
            raise ValueError(f"unknown plan keys {unknown}; allowed: {', '.join(_FIELDS)}")
        return cls(**data)

    @classmethod
    def data_parallel(cls, world: int, sharding: str) -> Plan:
        """The plan of the older ``sharding`` setting: ``ddp`` (ZeRO 0) or ``fsdp`` (ZeRO 3)
        over ``world`` data-parallel ranks."""
        return cls(dp=world, zero=3 if sharding == "fsdp" else 0)

    def describe(self) -> str:
        """A short human form: ``dp 2 x tp 2, zero 3``."""
        axes = [f"{n} {getattr(self, n)}" for n in ("dp", "tp", "pp") if getattr(self, n) > 1]
        text = " x ".join(axes) or "one rank"
        if self.dp > 1:
            text += f", zero {self.zero}" + (" offload" if self.offload else "")
        return text
