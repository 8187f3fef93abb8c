"""Our strategy: model-guided search under the SLA, with hard monotone pruning (a folder:
``evidence`` digests the history once per decision, ``priors`` borrows models for families
with too few runs, ``steps`` are the named steps, ``strategy`` runs them in order).

Each step fits a performance model (``perfmodel``: Pollux's step-time model, linear in six
coefficients) to the trials of each family of settings (precision, checkpointing, compile,
sharding; gradient accumulation and GPU count are inside the model), predicts every config not
measured yet, and profiles the one predicted best under the SLA. It stops when no config is
predicted to beat the best measured one by more than ``min_gain``. What the data cannot tell
apart is settled on the fast side (sync before any multi-GPU run, accumulation before one is
measured; see ``perfmodel``), so the search measures such regimes before ruling them out
(optimism in the face of uncertainty); a config may meet the SLA when its prediction does
within the model's own error (at least 3%), so a knife edge is settled by measuring. A family
measured at one config borrows the best family's model, scaled through that point; a family not
measured at all that the measurements point to enters with its neighbour's model (checkpointing
after its sibling ran out of memory, FSDP beside DDP; see ``priors``).

A job's global batch is kept by the space (``SearchSpace.global_batches``): a walk up a line
moves along the splits of one global batch (accumulation falls as the micro-batch grows), a
bisection probe is snapped to the largest split below its midpoint (``space.snap``), and the
neighbours of a config are the next splits on its line and the split nearest its micro-batch
on the next GPU count either side. The memory rules read ladder indices, which mean the same there.

Hard rules, which no prediction overrides (hand-written: Optuna's samplers know nothing of
them):

- Memory: micro-batches grow by galloping from the largest known fit, and after an OOM by
  bisection between the largest fit and the smallest OOM; nothing at or above a known OOM is
  tried, and under bf16 or fp16 nothing at or above twice fp32's OOM (autocast at best halves the
  activations; weights and optimizer state stay fp32). With DDP memory does not depend on
  the GPU count, but a fit is only *certain* at fewer GPUs than where it was seen, and an
  OOM at more (the Pollux tables cap the global batch).
  FSDP shards the model, so its memory per GPU falls as GPUs are added: there a fit is
  certain at more GPUs and an OOM at fewer. A sharded family's walk starts on the fewest GPUs
  above one (on one GPU every sharding is the same run) where its smallest micro-batch may fit.
  Checkpointing only frees memory: a checkpointing family counts its sibling's fits as its own.
  It is needed where the same settings without it run out of memory, seen or, under bf16/fp16,
  implied by fp32's (the autocast rule above).
- Latency: step time does not fall when the micro-batch or the accumulation grows, so a
  ceiling missed at micro-batch ``b`` beyond measurement noise (``History.latency_noise``) is
  missed at ``2b`` with the same other settings; a miss within the noise prunes nothing (where
  step time is flat across micro-batches, one noisy miss would prune every larger one).
- Activation checkpointing only adds work: it is tried only at micro-batches that do not fit
  without it.

Verdict: an SLA is reported infeasible only when no model, own or borrowed, predicts a config
meeting it, and after each modelled family's extreme config for the missed constraint and the
closest config's untried neighbours have been measured and missed, so one bad prediction
cannot hide a feasible config next to the closest, nor an unmeasured family predicted to meet.
The neighbour rule (issue 37): no verdict while a neighbour of the closest config on any axis
(``steps.axis_neighbours``: GPUs one and two either side, doubled and halved; micro-batch
doubled and halved; the other precision; checkpointing where the memory rules need it; the
other sharding) is neither measured nor known to run out of memory, to miss a ceiling, or to
lie outside the space, whether or not a model predicts it. The tuner's patience would end such
a search with the same verdict: the strategy holds that stop (``settled``) while a config it
may try is predicted to meet the SLA or a neighbour of the closest is open, and, once
something is feasible, while a config is predicted to beat the best by more than ``min_gain``
or a neighbour of the best that the rules allow is open (the local search).

Budget order: the walks go by expected effect, the batch split, GPU count and plan, precision
and memory savers first; a team's own declared settings (``SearchSpace.settings``) last, and
once a setting's effect is measured in one family it is carried to the others by a prior
(``priors``), not walked in each.
"""

from orchestrator.tuner.strategies.sla.evidence import Evidence, Prediction
from orchestrator.tuner.strategies.sla.priors import Family, family_of
from orchestrator.tuner.strategies.sla.strategy import SLASearchStrategy

__all__ = ["Evidence", "Family", "Prediction", "SLASearchStrategy", "family_of"]
