"""The control plane of SLA Orchestrator: job specs, the Redis store, the GPU pool on Ray,
the scheduler loop and the `orch` CLI.

Importing this package is cheap: nothing here imports torch or starts Ray until a command
needs it (see ``orchestrator.cli``).
"""

__version__ = "0.1.0"
