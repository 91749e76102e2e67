"""schemathesis against a real ``flexinfer proxy --static`` process, client auth off and on.

The proxy serves one model, ``fake``, from a fast fake engine (bench/fake_upstream.py), so
every generated request (any route, body, header or token) must get a documented status
and body, never a 5xx: the engine is always up, so no 502 or 503 is legitimate here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
from schemathesis.specs.openapi.checks import positive_data_acceptance

from flexinfer_common.bus.memory import MemoryBus
from flexinfer_proxy.app import create_app
from flexinfer_proxy.settings import ProxySettings
from flexinfer_proxy.static import StaticStore, parse_static
from flexinfer_testing.api_schema import document_schema, fuzz
from flexinfer_testing.repo import repo_root
from flexinfer_testing.stack import flexinfer_command

EXAMPLES = 12
"""Fuzzing examples per operation (61 operations); the coverage phase adds its own."""
TOKEN = "sk-schema-test-0123456789"


@dataclass
class Proxy:
    """A running static proxy and what the run observed."""

    url: str
    token: str | None
    proc: subprocess.Popen[bytes]
    statuses: Counter[int] = field(default_factory=Counter)
    cases: int = 0


def _wait_file(path: Path, proc: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + 60
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"{proc.args!r} did not start")
        time.sleep(0.05)
    return path.read_text()


@contextmanager
def _engine(work: Path) -> Iterator[str]:
    ready = work / "engine.url"
    script = repo_root() / "bench" / "fake_upstream.py"
    proc = subprocess.Popen([sys.executable, str(script), "--ready-file", str(ready)])
    try:
        yield _wait_file(ready, proc).strip()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@contextmanager
def _running(work: Path, token: str | None) -> Iterator[Proxy]:
    with _engine(work) as engine:
        ready = work / "proxy.json"
        env = {**os.environ, "FLEXINFER_READY_FILE": str(ready), "FLEXINFER_LOG_LEVEL": "WARNING"}
        env.pop("FLEXINFER_PROXY_AUTH_TOKENS", None)
        if token:
            env["FLEXINFER_PROXY_AUTH_TOKENS"] = json.dumps([token])
        command = flexinfer_command("proxy", "--static", f"fake={engine}", "--port", "0")
        proc = subprocess.Popen(command, env=env, cwd=work, stdin=subprocess.DEVNULL)
        try:
            url = json.loads(_wait_file(ready, proc))["proxy"]
            yield Proxy(url, token, proc)
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def _document(token: str | None) -> dict[str, Any]:
    """The OpenAPI document such a proxy serves (built in process)."""
    settings = ProxySettings(auth_tokens=[token] if token else [])
    store = StaticStore.from_declarations([parse_static("fake=http://127.0.0.1:9")], "default")
    document: dict[str, Any] = create_app(settings, bus=MemoryBus(), store=store).openapi()
    return document


@contextmanager
def _reported(name: str, request: pytest.FixtureRequest, proxy: Proxy) -> Iterator[Proxy]:
    rss = psutil.Process(proxy.proc.pid)
    before = rss.memory_info().rss / (1 << 20)
    yield proxy
    after = rss.memory_info().rss / (1 << 20)
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    assert capture is not None
    with capture.global_and_fixture_disabled():
        print(
            f"\nproxy schemathesis ({name}): {proxy.cases} cases; RSS {before:.1f} MiB before, "
            f"{after:.1f} MiB after; statuses {dict(sorted(proxy.statuses.items()))}"
        )


@pytest.fixture(scope="module")
def proxy_off(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Proxy]:
    with (
        _running(tmp_path_factory.mktemp("proxy-off"), None) as running,
        _reported("auth off", request, running) as reported,
    ):
        yield reported


@pytest.fixture(scope="module")
def proxy_on(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Proxy]:
    with (
        _running(tmp_path_factory.mktemp("proxy-on"), TOKEN) as running,
        _reported("auth on", request, running) as reported,
    ):
        yield reported


def _call(case: Any, proxy: Proxy, headers: dict[str, str] | None = None) -> None:
    proxy.cases += 1
    # A schema-valid body may rightly be refused: which model it names (and whether it
    # names one, or the X-Model-ID header or the path does) is not something a schema says,
    # and an unknown one is a documented 404.
    excluded = [positive_data_acceptance]
    response = case.call_and_validate(base_url=proxy.url, headers=headers, excluded_checks=excluded)
    proxy.statuses[response.status_code] += 1
    assert response.status_code < 500, response.text


@document_schema(_document(None), None, EXAMPLES)
@fuzz(EXAMPLES)
def test_proxy_api_matches_its_schema_auth_off(case: Any, proxy_off: Proxy) -> None:
    _call(case, proxy_off)


@document_schema(_document(None), None, EXAMPLES)
@fuzz(EXAMPLES)
def test_proxy_api_matches_its_schema_auth_on(case: Any, proxy_on: Proxy) -> None:
    _call(case, proxy_on, {"Authorization": f"Bearer {TOKEN}"})
