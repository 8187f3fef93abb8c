"""The auto-tuner: find each job's settings against its SLA with Optuna.

``space`` (what may be tried; ``orchestrator.run_config``: one point of it), ``objective``
(the SLA as objective and constraints), ``strategies`` (what to try next), ``evaluators``
(what a trial is), ``tuner`` (the loop), ``study`` (the Optuna journal in Redis), ``cache``
(skip or warm-start a repeated job), ``profile`` (the measured curves the scheduler uses),
``service`` (tuning a job spec).
Importing this package does not import torch, Optuna or Redis clients' heavy parts.
"""

from __future__ import annotations

from orchestrator.run_config import Config
from orchestrator.tuner.job_space import space_for
from orchestrator.tuner.objective import Goal, Measurement, Verdict
from orchestrator.tuner.space import DeviceCaps, SearchSpace

__all__ = ["Config", "DeviceCaps", "Goal", "Measurement", "SearchSpace", "Verdict", "space_for"]
