"""Parallel plans: how a training job's ranks share its model (data, tensor and pipeline
parallelism, ZeRO stages, offload).

Built as torchtitan builds its models' (``torchtitan/models/llama3/infra/parallelize.py``): one
ordered recipe (:func:`workers.parallel.recipe.parallelize`), each knob one small function in a
module of its own, driven by one :class:`Plan` and a :class:`~workers.parallel.dims.ParallelDims`
that owns the device mesh. Only :mod:`workers.parallel.plan` is imported here: it is plain Python,
so the control plane validates plans without importing torch.

- :mod:`~workers.parallel.plan`: the plan (degrees, ZeRO stage, offload) and its rules.
- :mod:`~workers.parallel.dims`: the ``pp x dp x tp`` mesh and this rank's place in it.
- :mod:`~workers.parallel.pipeline`: pipeline stages (``torch.distributed.pipelining``).
- :mod:`~workers.parallel.tensor`: tensor parallelism (``torch.distributed.tensor.parallel``).
- :mod:`~workers.parallel.data_parallel`: the data axis: DDP, ZeRO-1, FSDP2 (ZeRO-2/3, offload).
- :mod:`~workers.parallel.state`: checkpoint state, fingerprints and per-rank memory.
- :mod:`~workers.parallel.recipe`: the recipe that applies them in order.
"""

from __future__ import annotations

from workers.parallel.plan import ZERO_STAGES, Plan

__all__ = ["ZERO_STAGES", "Plan"]
