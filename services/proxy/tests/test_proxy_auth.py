"""Auth (constant-time bearer tokens, scoped grants) and rate limits (global, per model)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import openai
import pytest

from flexinfer_common.bus.memory import MemoryBus
from flexinfer_common.errors import ConfigError
from flexinfer_common.settings import TelemetrySettings
from flexinfer_proxy.app import create_app
from flexinfer_proxy.core.auth import Authenticator, AuthError, TokenGrant, load_token_file
from flexinfer_proxy.core.ratelimit import RateLimitedError, RateLimiter
from flexinfer_proxy.settings import ProxySettings
from flexinfer_proxy.static import StaticStore
from flexinfer_proxy.testing import make_model
from flexinfer_proxy.testing_stack import proxy_stack, upstreams
from flexinfer_testing.stack import flexinfer_command


def test_authenticator() -> None:
    auth = Authenticator(
        [TokenGrant(token="secret-one"), TokenGrant(token="secret-two", models=frozenset({"a"}))]
    )
    assert auth.authenticate(b"Bearer secret-one") is not None
    assert auth.authenticate(b"bearer   secret-two") is not None
    for bad in (
        None,
        b"",
        b"Bearer",
        b"Basic secret-one",
        b"Bearer secret-on",
        b"Bearer " + b"x" * 5000,
    ):
        with pytest.raises(AuthError):
            auth.authenticate(bad)
    assert Authenticator([]).authenticate(None) is None  # auth off


def test_token_file(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps([{"token": "tenant-token", "tenants": ["team-a"]}]))
    assert load_token_file(path)[0].tenants == frozenset({"team-a"})
    path.write_text("{oops")
    with pytest.raises(ConfigError):
        load_token_file(path)


def test_token_buckets() -> None:
    now = [0.0]
    limiter = RateLimiter(
        global_rps=10, global_burst=3, model_rps=1, model_burst=2, clock=lambda: now[0]
    )
    limiter.check("a")
    limiter.check("a")
    with pytest.raises(RateLimitedError) as info:
        limiter.check("a")  # model bucket empty
    assert info.value.retry_after == 1
    limiter.check("b")  # the global bucket still has one
    with pytest.raises(RateLimitedError, match="proxy"):
        limiter.check("c")
    now[0] = 1.0
    limiter.check("a")


async def test_auth_and_scopes_over_http(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(
        json.dumps(
            [
                {"token": "only-model-a", "models": ["a"]},
                {"token": "tenant-b-token", "tenants": ["team-b"]},
            ]
        )
    )
    b = make_model("b")
    b.metadata.labels["flexinfer.ai/tenant"] = "team-b"
    async with (
        upstreams(1) as ups,
        proxy_stack(
            tmp_path, [make_model("a"), b], auth_tokens=["admin-token"], auth_token_file=tokens
        ) as stack,
    ):
        url = ups[0][1]
        await stack.set_endpoints("default/a", [url])
        await stack.set_endpoints("default/b", [url])
        messages = [{"role": "user", "content": "hi"}]
        async with stack.openai("wrong-token") as client:
            with pytest.raises(openai.AuthenticationError) as info:
                await client.chat.completions.create(model="a", messages=messages)  # type: ignore[arg-type]
            assert info.value.status_code == 401
            assert info.value.body["code"] == "invalid_api_key"  # type: ignore[index]
        async with stack.openai("only-model-a") as client:
            await client.chat.completions.create(model="a", messages=messages)  # type: ignore[arg-type]
            with pytest.raises(openai.PermissionDeniedError):
                await client.chat.completions.create(model="b", messages=messages)  # type: ignore[arg-type]
            listed = [m.id async for m in client.models.list()]
            assert listed == ["a"]
        async with stack.openai("tenant-b-token") as client:
            await client.chat.completions.create(model="b", messages=messages)  # type: ignore[arg-type]
        async with stack.openai("admin-token") as client:
            assert {m.id async for m in client.models.list()} == {"a", "b"}
        async with httpx.AsyncClient() as raw:
            missing = await raw.post(f"{stack.url}/v1/chat/completions", json={"model": "a"})
            assert missing.status_code == 401
            assert missing.headers["www-authenticate"] == "Bearer"
            assert missing.json()["error"]["type"] == "authentication_error"
            # An unknown model is not revealed to a client without a valid token.
            ghost = await raw.post(f"{stack.url}/v1/chat/completions", json={"model": "ghost"})
            assert ghost.status_code == 401


async def test_rate_limits_over_http(tmp_path: Path) -> None:
    (tmp_path / "g").mkdir()
    async with (
        upstreams(1) as ups,
        proxy_stack(
            tmp_path,
            [make_model("a"), make_model("b")],
            model_rate_limit_rps=0.5,
            model_rate_limit_burst=2,
        ) as stack,
    ):
        for key in ("default/a", "default/b"):
            await stack.set_endpoints(key, [ups[0][1]])
        messages = [{"role": "user", "content": "hi"}]
        async with stack.openai() as client:
            for _ in range(2):
                await client.chat.completions.create(model="a", messages=messages)  # type: ignore[arg-type]
            with pytest.raises(openai.RateLimitError) as info:
                await client.chat.completions.create(model="a", messages=messages)  # type: ignore[arg-type]
            assert info.value.response.headers["retry-after"] == "2"
            assert info.value.body["code"] == "rate_limit_exceeded"  # type: ignore[index]
            await client.chat.completions.create(model="b", messages=messages)  # type: ignore[arg-type]
    async with (
        upstreams(1) as ups,
        proxy_stack(
            tmp_path / "g",
            [make_model("a"), make_model("b")],
            rate_limit_rps=1,
            rate_limit_burst=1,
        ) as stack,
    ):
        for key in ("default/a", "default/b"):
            await stack.set_endpoints(key, [ups[0][1]])
        async with httpx.AsyncClient() as raw:
            ok = await raw.post(f"{stack.url}/v1/chat/completions", json={"model": "a"})
            limited = await raw.post(f"{stack.url}/v1/chat/completions", json={"model": "b"})
        assert ok.status_code == 200
        assert limited.status_code == 429
        assert limited.headers["retry-after"] == "1"


def test_a_short_token_is_refused_with_one_readable_line(tmp_path: Path) -> None:
    env = {**os.environ, "FLEXINFER_PROXY_AUTH_TOKENS": '["sk-a","sk-b"]'}
    cmd = flexinfer_command("proxy", "--port", "0")
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "FLEXINFER_PROXY_AUTH_TOKENS" in lines[0]  # the variable the user set
    assert "8 to 4096" in lines[0]
    assert "sk-a" not in done.stderr  # the token itself is never echoed


async def test_metrics_can_require_the_admin_token(tmp_path: Path) -> None:
    admin = "admin-token-for-metrics-0001"
    telemetry = TelemetrySettings(metrics_auth=True)
    async with (
        upstreams(1) as [(_, url)],
        proxy_stack(
            tmp_path,
            [make_model("tiny")],
            auth_tokens=["client-token-0001"],
            admin_token=admin,
            telemetry=telemetry,
        ) as stack,
        httpx.AsyncClient(base_url=stack.url) as client,
    ):
        await stack.set_endpoints("default/tiny", [url])
        assert (await client.get("/metrics")).status_code == 401
        client_token = {"Authorization": "Bearer client-token-0001"}
        assert (await client.get("/metrics", headers=client_token)).status_code == 401
        scraped = await client.get("/metrics", headers={"Authorization": f"Bearer {admin}"})
        assert scraped.status_code == 200
        assert "flexinfer_proxy_requests_total" in scraped.text
        chat = {"model": "tiny", "messages": []}
        reply = await client.post("/v1/chat/completions", json=chat, headers=client_token)
        assert reply.status_code == 200
        assert (await client.get("/healthz")).status_code == 200


def test_metrics_auth_without_an_admin_token_refuses_to_start() -> None:
    settings = ProxySettings(telemetry=TelemetrySettings(metrics_auth=True))
    with pytest.raises(ConfigError, match="FLEXINFER_PROXY_ADMIN_TOKEN"):
        create_app(settings, bus=MemoryBus(), store=StaticStore([]))
