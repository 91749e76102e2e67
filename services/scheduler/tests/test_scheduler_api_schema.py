"""schemathesis against the scheduler's HTTP API, with admin auth off and on.

The extender's /filter, /prioritize and /score are in the same document: every generated
ExtenderArgs, valid or not, gets a documented status (200 or a 400 JSON body), never a 5xx.
"""

from __future__ import annotations

import secrets
from collections import Counter
from typing import Any

import pytest
from pydantic import SecretStr

from flexinfer_common.settings import TelemetrySettings
from flexinfer_scheduler.app import create_app
from flexinfer_scheduler.settings import SchedulerSettings
from flexinfer_testing.api_schema import FUZZ, asgi_schema, report

TOKEN = "sched-" + secrets.token_hex(20)
AUTH_OFF = SchedulerSettings(port=0)
# With a token, and /metrics guarded too, every operation but the probes needs it.
AUTH_ON = SchedulerSettings(
    port=0, auth_token=SecretStr(TOKEN), telemetry=TelemetrySettings(metrics_auth=True)
)
STATUSES: dict[str, Counter[int]] = {"auth-off": Counter(), "auth-on": Counter()}


@asgi_schema(create_app(AUTH_OFF), None)
@FUZZ
def test_scheduler_api_matches_its_schema_auth_off(case: Any) -> None:
    STATUSES["auth-off"][case.call_and_validate().status_code] += 1


@asgi_schema(create_app(AUTH_ON), TOKEN)
@FUZZ
def test_scheduler_api_matches_its_schema_auth_on(case: Any) -> None:
    STATUSES["auth-on"][case.call_and_validate().status_code] += 1


def test_the_runs_were_not_vacuous(request: pytest.FixtureRequest) -> None:
    report(request, "scheduler", STATUSES)
    assert {200, 400, 405} <= STATUSES["auth-off"].keys()
    assert 401 not in STATUSES["auth-off"]
    assert {200, 400, 401, 405} <= STATUSES["auth-on"].keys()
    for counts in STATUSES.values():
        assert not [status for status in counts if status >= 500]
