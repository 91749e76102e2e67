"""schemathesis against the agent's HTTP API, with admin auth off and on.

Today the API is the health probes and /metrics; the node endpoints (labels, cache)
join the same document (and this test) when the agent issue brings them.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from pydantic import SecretStr
from schemathesis.config import SchemathesisConfig

from flexinfer_agent.app import create_app
from flexinfer_agent.settings import AgentSettings
from flexinfer_common.settings import TelemetrySettings

TOKEN = "agent-" + secrets.token_hex(20)
EXAMPLES = 25
MODES = {
    "auth-off": AgentSettings(port=0),
    # With a token, and /metrics guarded too, every operation but the probes needs it.
    "auth-on": AgentSettings(
        port=0, auth_token=SecretStr(TOKEN), telemetry=TelemetrySettings(metrics_auth=True)
    ),
}
STATUSES: dict[str, Counter[int]] = {mode: Counter() for mode in MODES}


Test = Callable[..., None]


def _schema(mode: str) -> Callable[[Test], Test]:
    """The ``parametrize`` decorator of the mode's schema (typed: schemathesis's is not)."""
    config: dict[str, Any] = {"generation": {"max-examples": EXAMPLES, "deterministic": True}}
    if mode == "auth-on":
        config["auth"] = {"openapi": {"adminToken": {"bearer": TOKEN}}}
    app = create_app(MODES[mode])
    schema = schemathesis.openapi.from_asgi(
        "/openapi.json",
        app,
        config=SchemathesisConfig.from_dict(config),
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    parametrize: Callable[[Test], Test] = schema.parametrize()
    return parametrize


FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@_schema("auth-off")
@FUZZ
def test_agent_api_matches_its_schema_auth_off(case: Any) -> None:
    STATUSES["auth-off"][case.call_and_validate().status_code] += 1


@_schema("auth-on")
@FUZZ
def test_agent_api_matches_its_schema_auth_on(case: Any) -> None:
    STATUSES["auth-on"][case.call_and_validate().status_code] += 1


def test_the_runs_were_not_vacuous(request: pytest.FixtureRequest) -> None:
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    assert capture is not None
    with capture.global_and_fixture_disabled():
        for mode, statuses in STATUSES.items():
            print(f"\nagent schemathesis ({mode}): {sum(statuses.values())} cases; {statuses}")
    assert {200, 405} <= STATUSES["auth-off"].keys()
    assert 401 not in STATUSES["auth-off"]
    assert {200, 401, 405} <= STATUSES["auth-on"].keys()
