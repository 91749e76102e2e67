"""schemathesis over an in-process ASGI app: what the services' schema tests share."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig
from starlette.types import ASGIApp

Test = Callable[..., None]

EXAMPLES = 25
"""Fuzzing examples per operation and mode; the coverage phase adds its own cases."""

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
"""The hypothesis settings each generated case runs under."""


def asgi_schema(app: ASGIApp, token: str | None) -> Callable[[Test], Test]:
    """The ``parametrize`` decorator of ``app``'s OpenAPI document (typed: schemathesis's
    is not); with ``token``, the admin bearer token it sends where the document asks."""
    config: dict[str, Any] = {"generation": {"max-examples": EXAMPLES, "deterministic": True}}
    headers: dict[str, str] = {}
    if token is not None:
        config["auth"] = {"openapi": {"adminToken": {"bearer": token}}}
        headers = {"Authorization": f"Bearer {token}"}
    schema = schemathesis.openapi.from_asgi(
        "/openapi.json", app, config=SchemathesisConfig.from_dict(config), headers=headers
    )
    parametrize: Callable[[Test], Test] = schema.parametrize()
    return parametrize


def report(request: pytest.FixtureRequest, name: str, statuses: dict[str, Counter[int]]) -> None:
    """Print each mode's case count and statuses past pytest's capture."""
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    assert capture is not None
    with capture.global_and_fixture_disabled():
        for mode, counts in statuses.items():
            print(f"\n{name} schemathesis ({mode}): {sum(counts.values())} cases; {counts}")
