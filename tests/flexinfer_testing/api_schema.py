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
_SUPPRESSED = ["too_slow", "filter_too_much", "data_too_large"]
"""Health checks that only say the schemas are large: generation is still deterministic."""


def fuzz(examples: int = EXAMPLES) -> Callable[[Test], Test]:
    """The hypothesis settings each generated case runs under."""
    decorator: Callable[[Test], Test] = settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    return decorator


FUZZ = fuzz()


def _config(token: str | None, examples: int) -> SchemathesisConfig:
    config: dict[str, Any] = {
        "generation": {"max-examples": examples, "deterministic": True},
        "suppress-health-check": _SUPPRESSED,
    }
    if token is not None:
        config["auth"] = {"openapi": {"adminToken": {"bearer": token}}}
    return SchemathesisConfig.from_dict(config)


def asgi_schema(app: ASGIApp, token: str | None) -> Callable[[Test], Test]:
    """The ``parametrize`` decorator of ``app``'s OpenAPI document (typed: schemathesis's
    is not); with ``token``, the admin bearer token it sends where the document asks."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    schema = schemathesis.openapi.from_asgi(
        "/openapi.json", app, config=_config(token, EXAMPLES), headers=headers
    )
    parametrize: Callable[[Test], Test] = schema.parametrize()
    return parametrize


def document_schema(
    document: dict[str, Any], token: str | None, examples: int = EXAMPLES
) -> Callable[[Test], Test]:
    """The ``parametrize`` decorator of an OpenAPI ``document``, for cases sent over TCP
    to a service running as its own process."""
    schema = schemathesis.openapi.from_dict(document, config=_config(token, examples))
    parametrize: Callable[[Test], Test] = schema.parametrize()
    return parametrize


def report(request: pytest.FixtureRequest, name: str, statuses: dict[str, Counter[int]]) -> None:
    """Print each mode's case count and statuses past pytest's capture."""
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    assert capture is not None
    with capture.global_and_fixture_disabled():
        for mode, counts in statuses.items():
            print(f"\n{name} schemathesis ({mode}): {sum(counts.values())} cases; {counts}")
