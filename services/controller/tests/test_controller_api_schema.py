"""schemathesis against a real ``flexinfer controller`` process, with admin auth off and on.

Every generated request (valid and invalid Models as JSON and YAML, odd names and
namespaces, missing and wrong tokens) must get a documented status, a body matching the
documented schema, and never a 5xx. The controller runs as its own process, so its RSS is
measured before and after the run and printed with the case counts.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from pydantic import SecretStr
from schemathesis.specs.openapi.checks import positive_data_acceptance

from flexinfer_common.bus.memory import MemoryBus
from flexinfer_common.settings import StoreSettings
from flexinfer_common.store import create_store
from flexinfer_controller.app import create_app
from flexinfer_controller.runtime.local import runtime_id
from flexinfer_controller.settings import ControllerSettings
from flexinfer_controller.testing import fake_engine_python, kill_marked
from flexinfer_testing.api_schema import FUZZ, document_schema


@dataclass
class Controller:
    """A running controller process and what the run observed."""

    url: str
    token: str | None
    proc: subprocess.Popen[bytes]
    cases: Counter[str] = field(default_factory=Counter)
    """Cases sent, by documented path."""
    statuses: Counter[int] = field(default_factory=Counter)
    """Responses, by status code."""

    def headers(self) -> dict[str, str]:
        """The admin token header (none when auth is off)."""
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def rss_mib(self) -> float:
        """The controller process's resident set size."""
        return float(psutil.Process(self.proc.pid).memory_info().rss) / (1 << 20)


def _start(work: Path, token: str | None) -> subprocess.Popen[bytes]:
    ready = work / "ready.json"
    env = {
        **os.environ,
        "FLEXINFER_READY_FILE": str(ready),
        "FLEXINFER_STORE_URL": f"sqlite:///{work / 'store.db'}",
        "FLEXINFER_CONTROLLER_ENGINE_PYTHON": fake_engine_python(work / "bin"),
        "FLEXINFER_CONTROLLER_STOP_ENGINES_ON_SHUTDOWN": "true",
        "FLEXINFER_CONTROLLER_STOP_GRACE_S": "1",
        "FLEXINFER_LOG_LEVEL": "WARNING",
    }
    env.pop("FLEXINFER_CONTROLLER_AUTH_TOKEN", None)
    if token:
        env["FLEXINFER_CONTROLLER_AUTH_TOKEN"] = token
    command = [sys.executable, "-m", "flexinfer_controller", "--port", "0"]
    command += ["--data-dir", str(work / "data")]
    log = (work / "controller.log").open("wb")
    proc = subprocess.Popen(command, env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    log.close()
    deadline = time.monotonic() + 60
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"controller did not start: {(work / 'controller.log').read_text()}")
        time.sleep(0.05)
    return proc


TOKEN = "st-" + secrets.token_hex(20)


def _document(token: str | None) -> dict[str, Any]:
    """The OpenAPI document a controller with this token serves (built in process)."""
    store = create_store(StoreSettings(url="sqlite://"))
    try:
        secret = SecretStr(token) if token else None
        settings = ControllerSettings(port=0, auth_token=secret)
        document: dict[str, Any] = create_app(settings, bus=MemoryBus(), store=store).openapi()
    finally:
        asyncio.run(store.close())
    return document


@contextmanager
def _running(
    mode: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Controller]:
    work = tmp_path_factory.mktemp(f"controller-{mode}")
    token = TOKEN if mode == "auth-on" else None
    proc = _start(work, token)
    url = json.loads((work / "ready.json").read_text())["controller"]
    running = Controller(url, token, proc)
    # One real call first, so "before" includes what serving a request loads.
    assert httpx.get(f"{url}/v1/admin/models", headers=running.headers()).status_code == 200
    before = running.rss_mib()
    try:
        yield running
        after = running.rss_mib()
        total = sum(running.cases.values())
        paths = ", ".join(f"{path} {n}" for path, n in sorted(running.cases.items()))
        statuses = dict(sorted(running.statuses.items()))
        capture = request.config.pluginmanager.get_plugin("capturemanager")
        assert capture is not None
        with capture.global_and_fixture_disabled():
            print(
                f"\ncontroller schemathesis ({mode}): {total} cases; "
                f"RSS {before:.1f} MiB before, {after:.1f} MiB after; statuses {statuses}; "
                f"by path: {paths}"
            )
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        kill_marked(runtime_id(work / "data"))


@pytest.fixture(scope="module")
def controller_off(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Controller]:
    with _running("auth-off", request, tmp_path_factory) as running:
        yield running


@pytest.fixture(scope="module")
def controller_on(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Controller]:
    with _running("auth-on", request, tmp_path_factory) as running:
        yield running


def _call(case: Any, controller: Controller) -> None:
    controller.cases[case.path] += 1
    excluded = []
    if case.method in ("POST", "PUT"):
        # The body schema is the CRD's structural schema, which is what the Kubernetes API
        # server checks; the semantic rules (RFC 1123 names, source URIs, durations) are
        # checked after it and answered 422 invalid_model, as documented. So a body the
        # schema allows may rightly be refused: "schema-valid means accepted" does not hold.
        excluded.append(positive_data_acceptance)
    response = case.call_and_validate(base_url=controller.url, excluded_checks=excluded)
    controller.statuses[response.status_code] += 1


@document_schema(_document(None), None)
@FUZZ
def test_controller_api_matches_its_schema_auth_off(case: Any, controller_off: Controller) -> None:
    _call(case, controller_off)


@document_schema(_document(TOKEN), TOKEN)
@FUZZ
def test_controller_api_matches_its_schema_auth_on(case: Any, controller_on: Controller) -> None:
    _call(case, controller_on)


def test_the_runs_reached_success_and_every_refusal(
    controller_off: Controller, controller_on: Controller
) -> None:
    """Not vacuous: both runs created, read and deleted objects, and were refused too."""
    for controller in (controller_off, controller_on):
        assert {200, 201, 204, 400, 404, 405, 422} <= controller.statuses.keys(), (
            controller.statuses
        )
    assert 401 not in controller_off.statuses
    assert 401 in controller_on.statuses


@pytest.mark.parametrize("mode", ["auth-off", "auth-on"])
def test_the_served_document_is_the_one_tested(
    mode: str, controller_off: Controller, controller_on: Controller
) -> None:
    controller = controller_on if mode == "auth-on" else controller_off
    served = httpx.get(f"{controller.url}/openapi.json", headers=controller.headers()).json()
    assert served == _document(controller.token)


@pytest.mark.parametrize("token", [None, TOKEN], ids=["auth-off", "auth-on"])
def test_every_operation_documents_its_errors(token: str | None) -> None:
    document = _document(token)
    for path, item in document["paths"].items():
        for method, operation in item.items():
            responses = operation["responses"]
            where = f"{method.upper()} {path}"
            assert "422" not in responses or path.startswith("/v1/admin/"), where
            if path.startswith("/v1/admin/"):
                assert {"400", "503"} <= responses.keys(), where
                assert ("401" in responses) == (token is not None), where
                for status, answer in responses.items():
                    if status.startswith(("4", "5")):
                        schema_ref = answer["content"]["application/json"]["schema"]["$ref"]
                        assert schema_ref == "#/components/schemas/ErrorBody", (where, status)
