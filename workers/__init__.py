"""The data plane: the harness that runs a workload on one GPU (or CPU slot) and measures it.

This package is imported by the control plane for light things (job-spec validation reads
:data:`workers.workloads.registry.BUILTIN_WORKLOADS`), so importing it must stay cheap: nothing
here imports torch. The modules that need torch (``workers.harness``, the built-in workloads)
import it themselves, and only the worker process imports them.
"""
