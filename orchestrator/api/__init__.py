"""The HTTP API: FastAPI routers over the job store, with tokens, roles and an audit trail.

Modules: ``identity`` (who a request speaks for, what that principal may do), ``operations``
(every read and mutation, authorised and audited, shared by the API and the CLI's direct mode),
``models`` (request and response bodies), ``app`` (the app factory, the auth dependency and the
routers), ``server`` (uvicorn in a thread or in the foreground) and ``commands`` (the CLI's
``serve``, ``tokens``, ``audit`` and its API mode). Nothing here is imported by ``import
orchestrator``; FastAPI and uvicorn load only in ``app`` and ``server``.
"""
