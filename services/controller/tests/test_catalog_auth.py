"""Registry auth against a real token service: Basic, Bearer tokens cached and refreshed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from flexinfer_common.errors import PermanentError
from flexinfer_common.testing.oci_push import ModelPusher
from flexinfer_common.testing.oci_registry import ManualClock, TestRegistry, serve_registry
from flexinfer_controller.catalog.auth import RegistryAuth, parse_challenge
from flexinfer_controller.catalog.client import ClientOptions, OciClient
from flexinfer_controller.catalog.credentials import RegistryCredentials
from flexinfer_controller.catalog.errors import RegistryAuthError
from flexinfer_controller.catalog.reference import parse_registry_url

USERS = {"alice": "wonderland", "robot$ci": "s3cret"}
ALICE = RegistryCredentials("alice", "wonderland")


async def _served(registry: TestRegistry) -> AsyncIterator[str]:
    async with serve_registry(registry) as base:
        await ModelPusher(base, "alice", "wonderland").push_model("models/m", "v1", {"x": b"w"})
        yield base


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def bearer(clock: ManualClock) -> TestRegistry:
    return TestRegistry(auth="bearer", users=USERS, clock=clock, refresh_tokens={"rt-1": "alice"})


@pytest.fixture
async def bearer_url(bearer: TestRegistry) -> AsyncIterator[str]:
    async for base in _served(bearer):
        yield base


def _client(url: str, creds: RegistryCredentials | None, clock: ManualClock) -> OciClient:
    return OciClient(parse_registry_url(url), creds, options=ClientOptions(clock=clock))


async def test_one_token_serves_many_requests_until_it_expires(
    bearer: TestRegistry, bearer_url: str, clock: ManualClock
) -> None:
    bearer.token_requests.clear()
    async with _client(bearer_url, ALICE, clock) as client:
        await asyncio.gather(*(client.manifest("models/m", "v1") for _ in range(5)))
        await client.tags("models/m")
        assert len(bearer.token_requests) == 1  # concurrent 401s shared one token request
        assert bearer.token_requests[0]["user"] == "alice"
        assert bearer.token_requests[0]["scopes"] == ["repository:models/m:pull"]
        clock.advance(30)  # within the 60 s lifetime: the cached token is reused
        await client.tags("models/m")
        assert len(bearer.token_requests) == 1
        clock.advance(31)  # past it: a fresh token, before the registry has to refuse it
        await client.tags("models/m")
        assert len(bearer.token_requests) == 2


async def test_a_token_the_registry_stops_accepting_is_replaced(
    bearer: TestRegistry, bearer_url: str, clock: ManualClock
) -> None:
    async with _client(bearer_url, ALICE, clock) as client:
        await client.tags("models/m")
        bearer.revoke_tokens()
        bearer.token_requests.clear()
        assert await client.tags("models/m") == ["v1"]
        assert len(bearer.token_requests) == 1


async def test_the_catalog_scope_is_asked_for_separately(
    bearer: TestRegistry, bearer_url: str, clock: ManualClock
) -> None:
    bearer.token_requests.clear()
    async with _client(bearer_url, ALICE, clock) as client:
        assert await client.catalog() == ["models/m"]
    assert bearer.token_requests[0]["scopes"] == ["registry:catalog:*"]


async def test_wrong_credentials_are_a_permanent_auth_error(
    bearer_url: str, clock: ManualClock
) -> None:
    async with _client(bearer_url, RegistryCredentials("alice", "nope"), clock) as client:
        with pytest.raises(RegistryAuthError) as caught:
            await client.tags("models/m")
    assert isinstance(caught.value, PermanentError)
    assert caught.value.registry in bearer_url
    assert "token service" in caught.value.reason
    assert "nope" not in str(caught.value)


async def test_anonymous_pull_works_only_where_the_registry_allows_it(
    bearer: TestRegistry, bearer_url: str, clock: ManualClock
) -> None:
    async with _client(bearer_url, None, clock) as client:
        with pytest.raises(RegistryAuthError, match="UNAUTHORIZED"):
            await client.tags("models/m")
        bearer.anonymous_pull = True
        bearer.revoke_tokens()
        assert await client.tags("models/m") == ["v1"]
        with pytest.raises(RegistryAuthError):
            await client.catalog()  # anonymous users get no catalog scope


async def test_an_identity_token_is_exchanged_by_oauth2_post(
    bearer: TestRegistry, bearer_url: str, clock: ManualClock
) -> None:
    bearer.token_requests.clear()
    async with _client(bearer_url, RegistryCredentials(identity_token="rt-1"), clock) as client:
        assert await client.tags("models/m") == ["v1"]
    assert bearer.token_requests == [
        {"method": "POST", "user": "alice", "scopes": ["repository:models/m:pull"]}
    ]


async def test_a_token_without_expires_in_lives_the_default_60_seconds(
    bearer: TestRegistry, bearer_url: str, clock: ManualClock
) -> None:
    bearer.token_lifetime_s = None
    bearer.token_requests.clear()
    async with _client(bearer_url, ALICE, clock) as client:
        await client.tags("models/m")
        clock.advance(50)
        await client.tags("models/m")
        assert len(bearer.token_requests) == 1
        clock.advance(11)
        await client.tags("models/m")
        assert len(bearer.token_requests) == 2


async def test_basic_auth_is_sent_up_front_once_asked_for(clock: ManualClock) -> None:
    registry = TestRegistry(auth="basic", users=USERS)
    async for base in _served(registry):
        async with _client(base, RegistryCredentials("robot$ci", "s3cret"), clock) as client:
            registry.requests.clear()
            assert await client.tags("models/m") == ["v1"]
            assert await client.tags("models/m") == ["v1"]
            # One 401 to learn the scheme, then Basic on every request.
            assert len(registry.requests) == 3
        async with _client(base, RegistryCredentials("robot$ci", "bad"), clock) as client:
            with pytest.raises(RegistryAuthError, match="HTTP 401"):
                await client.tags("models/m")
        async with _client(base, None, clock) as client:
            with pytest.raises(RegistryAuthError, match="asks for Basic credentials"):
                await client.tags("models/m")


def test_challenges_parse_quoted_commas_and_escapes() -> None:
    challenge = parse_challenge(
        'Bearer realm="https://auth.example/token",service="reg",'
        'scope="repository:a/b:pull,push",error="invalid_token",x="q\\"uote"'
    )
    assert challenge is not None
    assert challenge.scheme == "bearer"
    assert challenge.realm == "https://auth.example/token"
    assert challenge.params["scope"] == "repository:a/b:pull,push"
    assert challenge.params["x"] == 'q"uote'
    basic = parse_challenge('Basic realm="x"')
    assert basic is not None
    assert basic.scheme == "basic"
    assert parse_challenge("") is None


async def test_a_realm_that_downgrades_https_to_http_gets_no_credentials() -> None:
    location = parse_registry_url("oci://registry.example.com")
    async with httpx.AsyncClient() as http:
        auth = RegistryAuth(location, ALICE, http)
        challenge = 'Bearer realm="http://registry.example.com/token",service="r"'
        response = httpx.Response(401, headers={"WWW-Authenticate": challenge})
        with pytest.raises(RegistryAuthError, match="downgrades HTTPS to HTTP"):
            await auth.answer(response, "repository:m:pull", None)
        bad = httpx.Response(401, headers={"WWW-Authenticate": 'Bearer realm="file:///etc"'})
        with pytest.raises(RegistryAuthError, match="not an http"):
            await auth.answer(bad, "repository:m:pull", None)
        none = httpx.Response(401)
        with pytest.raises(RegistryAuthError, match="no challenge"):
            await auth.answer(none, "repository:m:pull", None)
