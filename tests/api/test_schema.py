"""Schemathesis over the served OpenAPI spec: whatever a client sends to any operation, as an
admin or as a member, no answer is a 5xx.

Schemathesis' pytest plugin (``from_fixture``) does not run under this pytest, so each
operation's strategy is drawn with Hypothesis directly, against the live server.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from orchestrator.api.server import ApiServer

schemathesis = pytest.importorskip("schemathesis")

EXAMPLES = 12


def _operations(api: ApiServer) -> list[Any]:
    """Every operation of the served spec but the streams of a job's events and output (a
    generated job that never ends would hold them open; tests/api/test_client.py and
    tests/api/test_logs.py follow one)."""
    loaded = schemathesis.openapi.from_url(f"{api.url}/openapi.json")
    operations = [result.ok() for result in loaded.get_all_operations()]
    return [op for op in operations if not op.path.endswith("/stream")]


def test_no_operation_answers_5xx(api: ApiServer, tokens: dict[str, str]) -> None:
    operations = _operations(api)
    assert len(operations) >= 14
    headers = [{"Authorization": f"Bearer {tokens[who]}"} for who in ("admin", "member")]
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        )
        def no_server_error(case: Any) -> None:
            for auth in headers:
                response = case.call(base_url=api.url, headers=auth, timeout=30)
                assert response.status_code < 500, (case.method, case.path, response.text)

        no_server_error()
