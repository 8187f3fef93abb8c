"""Pipeline parallelism: consecutive blocks on ``pp`` stages, the step's micro-batches
flowing through them (``torch.distributed.pipelining``, GPipe schedule; Huang et al. 2019).

Each rank builds the whole model from the job's seed (the same weights as one process), then
keeps only its stage in place (:func:`split_stage`, torchtitan's way): the blocks it runs, and
the embeddings on the first stage, the head on the last. The blocks keep their names, so a
stage's state dict is a slice of the whole model's and checkpoints cross plans.

The pipeline's micro-batches are the job's gradient accumulation: the ``grad_accum``
micro-batches of one optimizer step go through the stages one after the other and their
gradients are averaged (``scale_grads``), which is exactly the accumulated step. The idle
share of a GPipe step is ``(p - 1) / (m + p - 1)`` for ``p`` stages and ``m`` micro-batches:
more accumulation fills the pipeline.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from workers.errors import HarnessConfigError
from workers.parallel.dims import ParallelDims
from workers.workloads.base import Batch, Layout

__all__ = ["Pipeline", "split_stage"]


def split_stage(
    model: torch.nn.Module, layout: Layout, pp: int, stage: int
) -> list[torch.nn.Module]:
    """Reduce ``model`` in place to pipeline stage ``stage`` of ``pp`` and return its blocks.

    Stage ``s`` runs blocks ``s * n / pp`` to ``(s + 1) * n / pp - 1`` (``pp`` divides the
    ``n`` blocks: :meth:`workers.parallel.plan.Plan.problems`).
    """
    blocks = getattr(model, layout.blocks, None)
    if not isinstance(blocks, torch.nn.ModuleDict):
        raise HarnessConfigError(
            f"pipeline parallelism needs the model's {layout.blocks!r} to be an nn.ModuleDict "
            f"(see workers.workloads.base.Layout), got {type(blocks).__name__}"
        )
    keys = list(blocks.keys())
    per = len(keys) // pp
    keep = keys[stage * per : (stage + 1) * per]
    for key in keys:
        if key not in keep:
            del blocks[key]
    if pp > 1:
        for name in layout.first if stage > 0 else ():
            setattr(model, name, None)
        for name in layout.last if stage < pp - 1 else ():
            setattr(model, name, None)
    return [blocks[k] for k in keep]


class Pipeline:
    """This rank's stage of the pipeline and the schedule that runs one optimizer step.

    Args:
        module: the stage (after :func:`split_stage`, tensor parallelism and FSDP).
        layout: the workload's layout (its ``split`` and ``loss``).
        dims: this rank's place in the mesh.
        micro_batches: micro-batches per step (the job's ``grad_accum``).
    """

    def __init__(
        self, module: torch.nn.Module, layout: Layout, dims: ParallelDims, micro_batches: int
    ) -> None:
        self.layout = layout
        self.dims = dims
        self.group = dims.group("pp")
        # imported here, not with the module: it imports torch._dynamo (about half of what the
        # harness's import costs), which a run without pipeline stages never uses, and every
        # worker, sandboxed child and service relaunch imports the harness before it runs
        from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

        stage = PipelineStage(module, dims.pp_rank, dims.plan.pp, dims.device, group=self.group)
        self.schedule = ScheduleGPipe(stage, n_microbatches=micro_batches, loss_fn=layout.loss)

    def step(self, batches: Sequence[Batch], autocast: Callable[[], Any]) -> float:
        """Forward and backward of one optimizer step's micro-batches (on the device); return
        their mean loss, the same on every stage."""
        parts = [self.layout.split(b) for b in batches]
        inputs = torch.cat([x for x, _ in parts])
        targets = torch.cat([y for _, y in parts])
        losses: list[torch.Tensor] = []
        first, last = self.dims.first_stage, self.dims.last_stage
        with autocast():
            if first:
                self.schedule.step(inputs)
            elif last:
                self.schedule.step(target=targets, losses=losses)
            else:
                self.schedule.step()
        mean = torch.stack(losses).float().mean().detach() if last else torch.zeros(())
        mean = mean.to(self.dims.device)
        dist.all_reduce(mean, group=self.group)  # only the last stage adds a loss
        return float(mean.item())
