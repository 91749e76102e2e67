"""Checks every HTTP service skeleton must pass: health, metrics, a real socket, its CLI.

Each service's test file keeps one test per check, so a failure still names the service.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import httpx
import pytest

from flexinfer_common.serving import serve_in_background


class Listens(Protocol):
    """Settings with a listen address (every service's ``*Settings``)."""

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...


Main = Callable[[list[str]], int]
"""A service's ``__main__.main``: flags in, exit status out."""


async def check_health_and_metrics(app: Any, *, unknown_path: str) -> None:
    """Health, readiness and Prometheus metrics answer in process; ``unknown_path`` is 404."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://service") as client:
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        assert (await client.get("/readyz")).status_code == 200
        metrics = await client.get("/metrics")
        assert metrics.status_code == 200
        assert "# HELP" in metrics.text
        assert (await client.get(unknown_path)).status_code == 404


async def check_serves_on_a_real_socket(app: Any, settings: Listens) -> None:
    """``app`` answers /healthz over TCP on ``settings.host`` (a free port), then stops."""
    async with (
        serve_in_background(app, settings.host) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        response = await client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def check_settings_env(
    settings: Callable[[], Listens],
    *,
    env_prefix: str,
    default_port: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The default port, then host and port taken from ``{env_prefix}HOST`` / ``PORT``."""
    assert settings().port == default_port
    monkeypatch.setenv(f"{env_prefix}PORT", "9999")
    monkeypatch.setenv(f"{env_prefix}HOST", "0.0.0.0")
    configured = settings()
    assert (configured.host, configured.port) == ("0.0.0.0", 9999)


@contextmanager
def busy_port(host: str = "127.0.0.1") -> Iterator[int]:
    """A port on ``host`` that a listening socket holds for the block."""
    with socket.socket() as busy:
        busy.bind((host, 0))
        busy.listen(1)
        yield int(busy.getsockname()[1])


def check_main_rejects_a_bad_port(main: Main, capsys: pytest.CaptureFixture[str]) -> None:
    """An out-of-range ``--port`` is a usage error (2) that names the port."""
    assert main(["--port", "70000"]) == 2
    assert "port" in capsys.readouterr().err


def check_main_reports_a_busy_port(main: Main, capsys: pytest.CaptureFixture[str]) -> None:
    """A port already taken fails startup (1) with the address in the message."""
    with busy_port() as port:
        assert main(["--host", "127.0.0.1", "--port", str(port)]) == 1
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


def check_main_refuses_an_open_api(module: str, *, env_prefix: str) -> None:
    """``python -m module`` on 0.0.0.0 without a token exits 2 with one line naming it."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(env_prefix)}
    result = subprocess.run(
        [sys.executable, "-m", module, "--host", "0.0.0.0", "--port", "0"],
        env=environ, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    err = result.stderr.strip()
    assert err.count("\n") == 0, err
    assert "refusing to serve an unauthenticated API on 0.0.0.0" in err
    assert f"{env_prefix}AUTH_TOKEN" in err
