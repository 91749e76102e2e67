"""schemathesis against the scheduler's HTTP API, with admin auth off and on.

Today the API is the health probes and /metrics; the extender's /filter and /prioritize
join the same document (and this test) when the placement core lands.
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

from flexinfer_common.settings import TelemetrySettings
from flexinfer_scheduler.app import create_app
from flexinfer_scheduler.settings import SchedulerSettings

TOKEN = "sched-" + secrets.token_hex(20)
EXAMPLES = 25
MODES = {
    "auth-off": SchedulerSettings(port=0),
    # With a token, and /metrics guarded too, every operation but the probes needs it.
    "auth-on": SchedulerSettings(
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
def test_scheduler_api_matches_its_schema_auth_off(case: Any) -> None:
    STATUSES["auth-off"][case.call_and_validate().status_code] += 1


@_schema("auth-on")
@FUZZ
def test_scheduler_api_matches_its_schema_auth_on(case: Any) -> None:
    STATUSES["auth-on"][case.call_and_validate().status_code] += 1


def test_the_runs_were_not_vacuous(request: pytest.FixtureRequest) -> None:
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    assert capture is not None
    with capture.global_and_fixture_disabled():
        for mode, statuses in STATUSES.items():
            print(f"\nscheduler schemathesis ({mode}): {sum(statuses.values())} cases; {statuses}")
    assert {200, 405} <= STATUSES["auth-off"].keys()
    assert 401 not in STATUSES["auth-off"]
    assert {200, 401, 405} <= STATUSES["auth-on"].keys()
