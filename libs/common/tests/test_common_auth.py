"""Admin tokens: loading, the constant-time check, deny by default, and the ASGI guard."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr
from pydantic_settings import SettingsConfigDict

from flexinfer_common.auth import (
    AdminAuthSettings,
    AdminTokens,
    AuthenticationError,
    guard_paths,
    install_admin_auth,
    is_loopback,
    load_admin_tokens,
    resolve_admin_tokens,
)
from flexinfer_common.errors import ConfigError
from flexinfer_common.settings import TelemetrySettings
from flexinfer_common.telemetry import METRICS_PATH, setup_telemetry
from flexinfer_common.web import health_router, install_error_handlers

TOKEN = "admin-token-0123456789abcdef"
OTHER = "other-token-0123456789abcdef"


class DemoSettings(AdminAuthSettings):
    """A service's settings, as controller/scheduler/agent compose them."""

    model_config = SettingsConfigDict(env_prefix="FLEXINFER_DEMO_", extra="ignore")


def test_fields_take_the_services_prefix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FLEXINFER_DEMO_AUTH_TOKEN", TOKEN)
    monkeypatch.setenv("FLEXINFER_DEMO_AUTH_TOKEN_FILE", str(tmp_path / "t"))
    monkeypatch.setenv("FLEXINFER_DEMO_ALLOW_UNAUTHENTICATED", "true")
    settings = DemoSettings()
    assert settings.auth_token is not None
    assert settings.auth_token.get_secret_value() == TOKEN
    assert settings.auth_token_file == tmp_path / "t"
    assert settings.allow_unauthenticated is True
    assert TOKEN not in repr(settings)


@pytest.mark.parametrize(
    ("header", "message", "challenge"),
    [
        (None, "admin token is needed", "Bearer"),
        (b"Basic " + TOKEN.encode(), "malformed", 'Bearer error="invalid_request"'),
        (b"Bearer", "malformed", 'Bearer error="invalid_request"'),
        (b"Bearer " + b"x" * 5000, "malformed", 'Bearer error="invalid_request"'),
        (b"Bearer " + OTHER.encode(), "invalid admin token", 'Bearer error="invalid_token"'),
        (b"Bearer " + TOKEN[:-1].encode(), "invalid admin token", 'Bearer error="invalid_token"'),
        (b"Bearer " + TOKEN.encode() + b"x", "invalid admin token", 'Bearer error="invalid_token"'),
    ],
)
def test_check_refuses(header: bytes | None, message: str, challenge: str) -> None:
    tokens = AdminTokens([TOKEN])
    with pytest.raises(AuthenticationError, match=message) as caught:
        tokens.check(header)
    assert caught.value.challenge == challenge
    assert TOKEN not in str(caught.value)


def test_check_accepts_every_configured_token_in_any_case_of_scheme() -> None:
    tokens = AdminTokens([OTHER, TOKEN])
    for header in (f"Bearer {TOKEN}", f"bearer {OTHER}", f"BEARER  {TOKEN} "):
        tokens.check(header.encode())
    assert TOKEN not in repr(tokens)


def test_overlaps_says_whether_two_lists_share_a_token() -> None:
    assert AdminTokens([OTHER, TOKEN]).overlaps(AdminTokens([TOKEN]))
    assert not AdminTokens([OTHER]).overlaps(AdminTokens([TOKEN]))


def test_tokens_come_from_the_setting_and_the_file(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"# rotated 2025-01\n{OTHER}\n\n  {TOKEN}  \n")
    path.chmod(0o600)
    tokens = load_admin_tokens(None, path)
    assert tokens is not None
    tokens.check(f"Bearer {TOKEN}".encode())
    tokens.check(f"Bearer {OTHER}".encode())
    assert load_admin_tokens(None, None) is None
    both = load_admin_tokens(SecretStr("x" * 16), path)
    assert both is not None
    both.check(b"Bearer " + b"x" * 16)


@pytest.mark.parametrize(
    "weak", ["hunter2", "has space 0123456789", "tab\t0123456789abcdef", "é" * 20]
)
def test_weak_tokens_are_refused_without_being_echoed(weak: str) -> None:
    with pytest.raises(ConfigError, match="16-4096 printable ASCII") as caught:
        load_admin_tokens(SecretStr(weak), None)
    assert weak not in str(caught.value)


def test_token_file_problems_are_config_errors(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(ConfigError, match="cannot read the admin token file"):
        load_admin_tokens(None, tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.write_text("# nothing yet\n\n")
    with pytest.raises(ConfigError, match="holds no token"):
        load_admin_tokens(None, empty)
    shared = tmp_path / "shared"
    shared.write_text(TOKEN)
    shared.chmod(0o644)
    with caplog.at_level(logging.WARNING):
        assert load_admin_tokens(None, shared) is not None
    assert "readable by every user" in caplog.text
    assert TOKEN not in caplog.text


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("", False),
        ("::", False),
        ("10.0.0.5", False),
        ("example.com", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_deny_by_default_beyond_loopback() -> None:
    telemetry = TelemetrySettings()
    assert resolve_admin_tokens(DemoSettings(), host="127.0.0.1", telemetry=telemetry) is None
    with pytest.raises(ConfigError) as caught:
        resolve_admin_tokens(DemoSettings(), host="0.0.0.0", telemetry=telemetry)
    message = str(caught.value)
    assert "\n" not in message
    for hint in ("0.0.0.0", "FLEXINFER_DEMO_AUTH_TOKEN", "FLEXINFER_DEMO_ALLOW_UNAUTHENTICATED"):
        assert hint in message
    opted_out = DemoSettings(allow_unauthenticated=True)
    assert resolve_admin_tokens(opted_out, host="0.0.0.0", telemetry=telemetry) is None
    guarded = DemoSettings(auth_token=SecretStr(TOKEN))
    assert resolve_admin_tokens(guarded, host="0.0.0.0", telemetry=telemetry) is not None


def test_metrics_auth_without_a_token_refuses_to_start() -> None:
    telemetry = TelemetrySettings(metrics_auth=True)
    with pytest.raises(ConfigError, match="METRICS_AUTH is on but no admin token"):
        resolve_admin_tokens(DemoSettings(), host="127.0.0.1", telemetry=telemetry)


def _app(settings: DemoSettings, telemetry: TelemetrySettings) -> FastAPI:
    app = FastAPI()
    install_admin_auth(app, settings, host="127.0.0.1", telemetry=telemetry)
    install_error_handlers(app)
    app.include_router(health_router())

    @app.get("/things")
    async def things() -> dict[str, str]:
        return {"ok": "yes"}

    setup_telemetry(app, "demo", telemetry)
    return app


async def _get(app: FastAPI, path: str, token: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://demo") as client:
        return await client.get(path, headers=headers)


@pytest.mark.parametrize("metrics_auth", [False, True])
async def test_guard_covers_every_route_but_the_probes(metrics_auth: bool) -> None:
    telemetry = TelemetrySettings(metrics_auth=metrics_auth)
    app = _app(DemoSettings(auth_token=SecretStr(TOKEN)), telemetry)
    for path in ("/healthz", "/readyz"):
        assert (await _get(app, path)).status_code == 200
    for path in ("/things", "/openapi.json", "/docs", "/healthz/", "/nowhere"):
        refused = await _get(app, path)
        assert refused.status_code == 401, path
        assert refused.headers["www-authenticate"] == "Bearer"
        assert refused.json()["error"]["type"] == "authentication_error"
        assert refused.json()["error"]["code"] == "unauthorized"
    assert (await _get(app, "/things", OTHER)).headers["www-authenticate"] == (
        'Bearer error="invalid_token"'
    )
    assert (await _get(app, "/things", TOKEN)).json() == {"ok": "yes"}
    assert (await _get(app, "/nowhere", TOKEN)).status_code == 404
    assert (await _get(app, METRICS_PATH)).status_code == (401 if metrics_auth else 200)
    metrics = await _get(app, METRICS_PATH, TOKEN)
    assert metrics.status_code == 200
    # Refusals are counted, by route template: an alert can watch for token guessing.
    assert 'handler="/things",method="GET",status="401"' in metrics.text


async def test_two_authorization_headers_are_refused() -> None:
    app = _app(DemoSettings(auth_token=SecretStr(TOKEN)), TelemetrySettings())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://demo") as client:
        headers = [("Authorization", f"Bearer {TOKEN}"), ("Authorization", f"Bearer {OTHER}")]
        response = await client.get("/things", headers=headers)
    assert response.status_code == 401


async def test_no_token_no_guard() -> None:
    app = _app(DemoSettings(), TelemetrySettings())
    assert (await _get(app, "/things")).status_code == 200
    schema = app.openapi()
    assert "securitySchemes" not in schema.get("components", {})


async def test_openapi_documents_the_scheme_and_the_401() -> None:
    app = _app(DemoSettings(auth_token=SecretStr(TOKEN)), TelemetrySettings(metrics_auth=True))
    schema = app.openapi()
    assert schema["components"]["securitySchemes"]["adminToken"]["scheme"] == "bearer"
    things = schema["paths"]["/things"]["get"]
    assert things["security"] == [{"adminToken": []}]
    assert things["responses"]["401"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorBody"
    }
    assert "401" in schema["paths"][METRICS_PATH]["get"]["responses"]
    for probe in ("/healthz", "/readyz"):
        assert "security" not in schema["paths"][probe]["get"]
    assert app.openapi() is schema


async def test_guard_paths_guards_only_what_it_is_told() -> None:
    app = FastAPI()
    guard_paths(app, AdminTokens([TOKEN]), lambda path: path == METRICS_PATH)
    app.include_router(health_router())

    @app.get("/v1/models")
    async def models() -> dict[str, str]:
        return {"object": "list"}

    setup_telemetry(app, "proxy", TelemetrySettings(), instrument_requests=False)
    assert (await _get(app, "/v1/models")).status_code == 200
    assert (await _get(app, METRICS_PATH)).status_code == 401
    assert (await _get(app, METRICS_PATH, TOKEN)).status_code == 200
