"""The control plane's loop: the one writer of job state, in named phases (see ``loop``).

``transitions`` (what an ended run means for its job), ``snapshot`` (the builder the simulator
shares), ``invariants`` (the decision contract), ``ledger`` (who holds which GPUs) and
``pool_view`` are pure; ``loop`` does the I/O, through the store and a runtime, its reap steps
in ``reap`` and its actions on gangs (start, resize, stop) in ``gangs``.
"""
