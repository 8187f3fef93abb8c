"""Request bodies read as the CLI reads files, and validation errors that always encode.

- A JSON body is parsed by :func:`orchestrator.inputs.parse_json`, the parser of the CLI's
  ``.json`` files: a duplicate key (Python's parser lets the last one silently win), nesting
  deeper than 32 levels and an integer longer than 40 digits are refused with 422 naming the
  problem, as ``orch submit`` refuses them in a file. Routers take it with
  ``APIRouter(route_class=StrictJsonRoute)``.
- A 422 echoes what was refused (``input``, ``ctx``). Python's parser accepts ``NaN`` and
  ``Infinity`` (the models refuse them, naming the field), but they cannot be encoded as JSON,
  so FastAPI's own handler failed with a 500 and a reset connection; :func:`validation_failed`
  shows non-finite numbers as strings (``"nan"``, ``"inf"``) and bytes as text. A lone
  surrogate (``"\\ud800"``) is refused by the parser, naming it; any that reaches an answer
  is shown escaped, as UTF-8 cannot encode it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from orchestrator.errors import SpecError
from orchestrator.inputs import parse_json

__all__ = [
    "StrictJsonRequest",
    "StrictJsonRoute",
    "encodable",
    "strict_json",
    "validation_failed",
]


class StrictJsonRequest(Request):
    """A request whose JSON body is parsed with the CLI's limits (see the module)."""

    async def json(self) -> Any:
        """The body as JSON data, parsed once.

        Raises:
            HTTPException: 422, one item per problem (a duplicate key, not UTF-8 or not JSON,
                too deep, an overlong integer), in the shape of FastAPI's own 422.
        """
        if not hasattr(self, "_strict_json"):
            self._strict_json = strict_json(await self.body())
        return self._strict_json


def strict_json(raw: bytes) -> Any:
    """A request body as JSON data, parsed with the CLI's limits (see the module).

    Raises:
        HTTPException: 422, as :meth:`StrictJsonRequest.json`.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise _refused([f"not UTF-8 text (invalid byte at offset {err.start})"]) from None
    try:
        return parse_json(text, "body")
    except SpecError as err:
        raise _refused(err.problems) from None


def _refused(problems: list[str]) -> HTTPException:
    # An HTTPException, not a RequestValidationError: FastAPI turns any other error raised
    # while it reads the body into a bare 400 "There was an error parsing the body".
    detail = [{"type": "json_invalid", "loc": ["body"], "msg": encodable(p)} for p in problems]
    return HTTPException(status_code=422, detail=detail)


class StrictJsonRoute(APIRoute):
    """A route whose handler gets a :class:`StrictJsonRequest` (FastAPI's documented way to
    change how a body is read)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """The route's handler, reading the body strictly."""
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(StrictJsonRequest(request.scope, request.receive))

        return strict


def encodable(value: Any) -> Any:
    """``value`` with everything JSON cannot hold exactly made text: non-finite numbers
    (``nan``, ``inf``, ``-inf``), a lone surrogate (which UTF-8 cannot encode: shown as
    ``\\ud800``), bytes (decoded, bad bytes replaced), anything not plain data (its
    ``str``)."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, dict):
        return {str(k): encodable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encodable(v) for v in value]
    return str(value)


async def validation_failed(request: Request, err: RequestValidationError) -> JSONResponse:
    """FastAPI's 422 (``detail``: one item per problem, with ``loc``, ``msg``, ``type``,
    ``input`` and ``ctx``), made encodable whatever was sent."""
    return JSONResponse({"detail": encodable(list(err.errors()))}, status_code=422)
