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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ZERO_STAGES", "ModelShape", "Plan", "divisors", "split_problems"]

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

    def problems(self, *, world: int | None = None, where: str = "plan") -> list[str]:
        """What is wrong with the plan on its own, one message per problem, each naming its
        field (what it asks of the model: :func:`split_problems`).

        Args:
            world: the ranks (GPUs) the job runs on, when known: the degrees must multiply to it.
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
    def on(cls, gpus: int, tp: int, pp: int, zero: int) -> Plan | None:
        """The plan of ``tp x pp`` model ranks and ZeRO stage ``zero`` on ``gpus`` GPUs (the
        rest replicas), or ``None`` when it is none: ``tp x pp`` does not divide the GPUs, a
        ZeRO stage asked of one replica (nothing to shard), or a plan :meth:`problems` refuses
        (ZeRO 0 and 1 on a 1-D plan only)."""
        if gpus % (tp * pp):
            return None
        dp = gpus // (tp * pp)
        if dp == 1 and zero:
            return None
        plan = cls(dp=dp, tp=tp, pp=pp, zero=zero)
        return None if plan.problems(world=gpus) else plan

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


@dataclass(frozen=True)
class ModelShape:
    """What the plan rules read of a model, as plain numbers (no torch). The harness reads it
    off the built model (``workers.parallel.recipe.shape_of``); the control plane computes it
    from a built-in workload's arguments (``workers.workloads.shapes.builtin_shape``), so that a
    job file is refused at submission by the rule the harness would refuse it by at start
    (:func:`split_problems`).

    Attributes:
        blocks: the repeated blocks pipeline stages split; ``None``: the workload gives no
            layout (``Workload.layout``), so it runs data-parallel only.
        heads: what every tensor-parallel degree must divide (the attention heads).
        widths: each tensor-parallel layer (path in a block) -> the features the split divides.
        params: the whole model's parameters (``None``: unknown), for the memory per rank.
    """

    blocks: int | None = None
    heads: int = 1
    widths: Mapping[str, int] = field(default_factory=dict)
    params: int | None = None


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` (``n >= 1``), ascending: the degrees that split it evenly."""
    return [d for d in range(1, n + 1) if n % d == 0]


def split_problems(
    plan: Plan, shape: ModelShape, *, where: str = "plan", workload: str = "the workload"
) -> list[str]:
    """Why ``plan``'s tensor and pipeline degrees cannot split a model of ``shape`` (empty if
    they can): ``pp`` must divide its blocks, ``tp`` its heads and every tensor-parallel
    layer's width, and either needs a layout. Each message names the field and what it may be.

    Args:
        where: the prefix of field names (``run.plan``, ``tuning.bounds.plan``).
        workload: how messages name the workload.
    """
    tp, pp = plan.tp, plan.pp
    if tp == 1 and pp == 1:
        return []
    if shape.blocks is None:
        return [
            f"{where}.tp and {where}.pp need a workload that gives its layout "
            f"(Workload.layout); {workload} does not: use dp and zero only"
        ]
    p: list[str] = []
    if shape.blocks % pp:
        allowed = ", ".join(map(str, divisors(shape.blocks)))
        p.append(
            f"{where}.pp must divide the model's {shape.blocks} blocks, got {pp} "
            f"(allowed: {allowed})"
        )
    if shape.heads % tp:
        allowed = ", ".join(map(str, divisors(shape.heads)))
        p.append(
            f"{where}.tp must divide the model's {shape.heads} attention heads, got {tp} "
            f"(allowed: {allowed})"
        )
    else:  # the widths of a model whose heads split: a user layout may still not
        p += [
            f"{where}.tp must divide {path}'s {width} features, got {tp}"
            for path, width in shape.widths.items()
            if width % tp
        ]
    return p
