"""``orch``'s integrations with training frameworks, one module each, imported on demand.

``from workers.integrations import hf`` (Hugging Face's ``Trainer``: extra ``[hf]``) or
``from workers.integrations import lightning`` (Lightning's ``Trainer``: extra ``[lightning]``).
Each maps the run's settings (:func:`workers.job.context`) to the framework's own options and
adds a callback that reports each optimizer step, checkpoints through the framework when
``orch`` asks and stops on preemption. Nothing here imports a framework until its module is
imported; a module whose framework is missing raises :class:`ImportError` naming the extra.
"""

from __future__ import annotations

__all__ = ["missing_extra"]


def missing_extra(framework: str, extra: str) -> ImportError:
    """The error an integration raises when its framework is not installed."""
    return ImportError(
        f"{framework} is not installed in the worker's Python: "
        f"pip install 'sla-orchestrator[{extra}]'"
    )
