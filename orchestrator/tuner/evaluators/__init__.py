"""Evaluators: what a trial is (a real profiling run, or a table lookup)."""

from __future__ import annotations

from orchestrator.tuner.evaluators.base import Evaluator
from orchestrator.tuner.evaluators.harness import HarnessEvaluator
from orchestrator.tuner.evaluators.table import TableEvaluator

__all__ = ["Evaluator", "HarnessEvaluator", "TableEvaluator"]
