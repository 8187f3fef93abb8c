"""The recipe: a plan applied to a training workload's model, always in the same order.

torchtitan's ``parallelize_llama`` order, one small function per knob:

1. pipeline: keep this rank's stage (:mod:`workers.parallel.pipeline`);
2. tensor parallelism over the ``tp`` axis (:mod:`workers.parallel.tensor`);
3. activation checkpointing of the (stage's) blocks;
4. the data axis: DDP, ZeRO-1's DDP, or FSDP2 over the ``dp`` axis (ZeRO 2 and 3, offload)
   (:mod:`workers.parallel.data_parallel`);
5. ``torch.compile``: the module the loop calls (the DDP wrapper, as PyTorch documents), or
   under a pipeline each block of the stage;
6. the optimizer, over the parameters as sharded (ZeRO-1 wraps it);
7. the pipeline schedule over the stage.

Everything a plan cannot do with a workload is refused first, with the field to change
(:func:`plan_problems`), before any collective starts.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workers.config import HarnessConfig
from workers.errors import HarnessConfigError
from workers.optimizations import apply_activation_checkpointing, checkpointed_blocks
from workers.parallel import data_parallel, pipeline, tensor
from workers.parallel.dims import ParallelDims
from workers.parallel.plan import ModelShape, Plan, split_problems
from workers.workloads.base import Layout, Workload

__all__ = ["Parallelized", "check", "parallelize", "plan_problems", "shape_of"]


@dataclass
class Parallelized:
    """What the training loop needs of a parallelized model.

    Attributes:
        model: this rank's model, unwrapped (under a pipeline: its stage), sharded in place.
        module: what the loop calls for a micro-batch (a DDP or compiled wrapper, or ``model``).
        synced: what gradient sync is switched on (a DDP wrapper, an FSDP module or ``model``:
            see :func:`workers.parallel.data_parallel.grad_sync`).
        optimizer: over ``model``'s parameters as this rank holds them.
        pipeline: the stage's schedule, when ``pp > 1`` (the loop calls it instead of ``module``).
        dims: this rank's place in the mesh.
    """

    model: torch.nn.Module
    module: torch.nn.Module
    synced: torch.nn.Module
    optimizer: torch.optim.Optimizer
    pipeline: pipeline.Pipeline | None
    dims: ParallelDims


def plan_problems(
    plan: Plan, workload: Workload, config: HarnessConfig, world: int, device: torch.device
) -> list[str]:
    """Why ``plan`` cannot run ``workload`` with ``config`` on ``world`` ranks (empty if it can):
    the plan's own rules, the split of the model (:func:`workers.parallel.plan.split_problems`,
    the rule a job file is checked by at submission), the layout's, and the device's."""
    layout = workload.layout
    p = plan.problems(world=world)
    p += split_problems(plan, shape_of(workload), workload=repr(config.workload))
    if (plan.tp > 1 or plan.pp > 1) and layout is not None and not _blocks(workload, layout):
        p.append(
            f"plan.tp and plan.pp need the model's {layout.blocks!r} to be a non-empty "
            "nn.ModuleDict (see workers.workloads.base.Layout)"
        )
    if plan.tp > 1 and layout is not None:
        p += tensor.tensor_parallel_problems(_blocks(workload, layout), layout)
    if plan.offload and device.type != "cuda":
        p.append("plan.offload needs CUDA (on a CPU the shards are in host memory already)")
    if plan.pp > 1 and config.precision == "fp16" and device.type == "cuda":
        p.append("plan.pp with fp16 (a GradScaler) is not supported: use bf16 or fp32")
    return p


def shape_of(workload: Workload) -> ModelShape:
    """What the plan rules read of ``workload``'s model (its blocks, heads, tensor-parallel
    widths, parameters), read off the built model."""
    params = sum(p.numel() for p in workload.model.parameters())
    layout = workload.layout
    if layout is None:
        return ModelShape(params=params)
    blocks = _blocks(workload, layout)
    return ModelShape(len(blocks), layout.tp_divides, tensor.widths(blocks, layout), params)


def _blocks(workload: Workload, layout: Layout) -> list[torch.nn.Module]:
    """The layout's blocks (none when ``layout.blocks`` names no ``nn.ModuleDict``: then
    :func:`plan_problems` says so)."""
    found = getattr(workload.model, layout.blocks, None)
    return list(found.values()) if isinstance(found, torch.nn.ModuleDict) else []


def parallelize(
    workload: Workload, plan: Plan, config: HarnessConfig, lr: float, dims: ParallelDims
) -> Parallelized:
    """Apply ``plan`` to ``workload.model`` (on its device, in the joined process group).

    Raises:
        HarnessConfigError: the plan cannot run this workload (see :func:`plan_problems`).
    """
    model, layout = workload.model, workload.layout
    blocks = list(workload.blocks)
    if plan.pp > 1:
        assert layout is not None  # plan_problems
        blocks = pipeline.split_stage(model, layout, plan.pp, dims.pp_rank)
    if plan.tp > 1:
        assert layout is not None  # plan_problems
        tensor.apply_tensor_parallel(blocks, layout, dims.mesh["tp"])
    if config.activation_checkpointing:  # every block, or the share the setting names
        apply_activation_checkpointing(checkpointed_blocks(blocks, config.activation_checkpointing))
    synced = module = _data_axis(model, blocks, plan, dims)
    if config.compile:
        module = _compile(module, blocks, plan)
    optimizer = data_parallel.make_optimizer(
        model, config.optimizer, lr, zero=plan.zero if plan.dp > 1 else 0
    )
    pipe = None
    if plan.pp > 1:
        assert layout is not None  # plan_problems
        pipe = pipeline.Pipeline(model, layout, dims, config.grad_accum)
    return Parallelized(model, module, synced, optimizer, pipe, dims)


def check(
    plan: Plan, workload: Workload, config: HarnessConfig, world: int, device: torch.device
) -> None:
    """Raise :class:`HarnessConfigError` listing :func:`plan_problems`, if any."""
    problems = plan_problems(plan, workload, config, world, device)
    if problems:
        raise HarnessConfigError("invalid plan: " + "; ".join(problems))


def _data_axis(
    model: torch.nn.Module, blocks: list[torch.nn.Module], plan: Plan, dims: ParallelDims
) -> torch.nn.Module:
    """Step 4: the module the loop calls, synced over the data axis."""
    if plan.dp == 1:
        return model
    if plan.zero <= 1:  # DDP spans the whole group: plans with tp or pp use FSDP (Plan rules)
        return data_parallel.apply_ddp(model, dims.device)
    data_parallel.apply_fsdp(model, blocks, dims.mesh["dp"], zero=plan.zero, offload=plan.offload)
    return model


def _compile(module: torch.nn.Module, blocks: list[torch.nn.Module], plan: Plan) -> torch.nn.Module:
    """Step 5: compile the module the loop calls, or under a pipeline each block in place
    (the schedule calls the stage, not the loop)."""
    if plan.pp == 1:
        return torch.compile(module)  # type: ignore[return-value]
    for block in blocks:
        block.compile()
    return module
