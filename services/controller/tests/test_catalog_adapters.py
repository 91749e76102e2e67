"""Registry adapters: detection, Harbor's two listing paths, GHCR's named repos, ECR auth."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from flexinfer_common.errors import ConfigError
from flexinfer_common.testing.oci_push import ModelPusher
from flexinfer_common.testing.oci_registry import TestRegistry, serve_registry
from flexinfer_controller.catalog.adapters import default_adapters
from flexinfer_controller.catalog.client import ClientOptions
from flexinfer_controller.catalog.credentials import parse_dockerconfigjson
from flexinfer_controller.catalog.errors import RegistryAuthError
from flexinfer_controller.catalog.harbor import HarborAdapter
from flexinfer_controller.catalog.reference import parse_registry_url
from flexinfer_controller.catalog.types import RegistrySource

HARBOR_USERS = {"admin": "Harbor12345", "dev": "devpass"}
REPOS = ["llm/llama", "llm/mistral", "vision/clip", "audio/whisper", "audio/bark"]


def _secret(url: str, user: str, password: str, adapter: str | None = None) -> RegistrySource:
    host = parse_registry_url(url).registry
    config = parse_dockerconfigjson({"auths": {host: {"username": user, "password": password}}})
    return RegistrySource(url, credentials=config, adapter=adapter)


async def _push_all(url: str, user: str, password: str, repos: list[str]) -> None:
    pusher = ModelPusher(url, user, password)
    for repo in repos:
        await pusher.push_model(repo, "v1", {"model.safetensors": repo.encode()})


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("oci://ghcr.io/acme/models", "ghcr"),
        ("oci://123456789012.dkr.ecr.eu-west-1.amazonaws.com", "ecr"),
        ("oci://123456789012.dkr.ecr-fips.us-gov-west-1.amazonaws.com/m", "ecr"),
        ("oci://123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn", "ecr"),
    ],
)
async def test_known_hosts_pick_their_adapter_without_a_request(url: str, expected: str) -> None:
    source = RegistrySource(url)
    name = await default_adapters().detect(source, parse_registry_url(url), ClientOptions())
    assert name == expected


@pytest.fixture
async def harbor() -> AsyncIterator[tuple[TestRegistry, str]]:
    registry = TestRegistry(
        auth="bearer", users=HARBOR_USERS, catalog_users=frozenset({"admin"}), harbor=True
    )
    async with serve_registry(registry) as url:
        await _push_all(url, "admin", "Harbor12345", REPOS)
        yield registry, url


async def test_harbor_is_detected_by_its_systeminfo_and_others_are_generic(
    harbor: tuple[TestRegistry, str],
) -> None:
    adapters = default_adapters()
    _, url = harbor
    source = RegistrySource(url)
    assert await adapters.detect(source, parse_registry_url(url), ClientOptions()) == "harbor"
    async with serve_registry(TestRegistry()) as plain:
        location = parse_registry_url(plain)
        assert await adapters.detect(RegistrySource(plain), location, ClientOptions()) == "generic"


async def test_harbor_admins_list_through_the_catalog(harbor: tuple[TestRegistry, str]) -> None:
    registry, url = harbor
    adapter = await default_adapters().open(_secret(url, "admin", "Harbor12345"))
    registry.requests.clear()
    try:
        assert adapter.name == "harbor"
        assert await adapter.list_repositories() == sorted(REPOS)
    finally:
        await adapter.aclose()
    assert not any(path.startswith("/api/") for _, path, _ in registry.requests)


async def test_harbor_users_without_catalog_access_list_through_the_api(
    harbor: tuple[TestRegistry, str],
) -> None:
    registry, url = harbor
    adapter = await default_adapters().open(_secret(url, "dev", "devpass"))
    assert isinstance(adapter, HarborAdapter)
    adapter.api_page_size = 2  # three projects, two per page: pagination is exercised
    registry.requests.clear()
    try:
        assert sorted(await adapter.list_repositories()) == sorted(REPOS)
    finally:
        await adapter.aclose()
    paths = [path for _, path, _ in registry.requests]
    assert paths.count("/api/v2.0/projects") == 2
    assert "/api/v2.0/projects/audio/repositories" in paths


async def test_a_harbor_project_in_the_url_limits_the_listing(
    harbor: tuple[TestRegistry, str],
) -> None:
    registry, url = harbor
    adapter = await default_adapters().open(_secret(f"{url}/audio", "dev", "devpass"))
    registry.requests.clear()
    try:
        assert sorted(await adapter.list_repositories()) == ["audio/bark", "audio/whisper"]
    finally:
        await adapter.aclose()
    assert "/api/v2.0/projects" not in [path for _, path, _ in registry.requests]


async def test_ghcr_lists_the_named_repository_with_a_token_fetched_up_front() -> None:
    registry = TestRegistry(auth="bearer", users={"octo": "ghp_pat"}, anonymous_pull=True)
    async with serve_registry(registry) as url:
        await _push_all(url, "octo", "ghp_pat", ["acme/llama", "acme/other"])
        adapter = await default_adapters().open(RegistrySource(f"{url}/acme/llama", adapter="ghcr"))
        registry.requests.clear()
        registry.token_requests.clear()
        try:
            assert await adapter.list_repositories() == ["acme/llama"]
            assert await adapter.client.tags("acme/llama") == ["v1"]
        finally:
            await adapter.aclose()
    # Anonymous token from the known realm, then a single (authorized) tags request.
    assert registry.token_requests == [
        {"method": "GET", "user": None, "scopes": ["repository:acme/llama:pull"]}
    ]
    assert [path for _, path, _ in registry.requests] == ["/v2/acme/llama/tags/list"]


@pytest.mark.parametrize(
    ("url", "message"),
    [("oci://ghcr.io/acme", "names only the owner 'acme'"), ("oci://ghcr.io", "has no catalog")],
)
async def test_ghcr_cannot_list_owners(url: str, message: str) -> None:
    adapter = await default_adapters().open(RegistrySource(url))
    try:
        with pytest.raises(ConfigError, match=message):
            await adapter.list_repositories()
    finally:
        await adapter.aclose()


async def test_ecr_sends_the_aws_token_up_front_and_explains_expiry() -> None:
    registry = TestRegistry(auth="basic", users={"AWS": "token-of-today"})
    async with serve_registry(registry) as url:
        await _push_all(url, "AWS", "token-of-today", ["team/llama"])
        good = await default_adapters().open(_secret(url, "AWS", "token-of-today", "ecr"))
        registry.requests.clear()
        try:
            assert await good.list_repositories() == ["team/llama"]
        finally:
            await good.aclose()
        # No 401 round trip, and ECR's page-size ceiling respected.
        assert registry.requests == [("GET", "/v2/_catalog", "n=1000")]
        bad = await default_adapters().open(_secret(url, "AWS", "token-of-yesterday", "ecr"))
        try:
            with pytest.raises(RegistryAuthError, match="expire after 12 hours"):
                await bad.list_repositories()
        finally:
            await bad.aclose()
        none = await default_adapters().open(RegistrySource(url, adapter="ecr"))
        try:
            with pytest.raises(RegistryAuthError, match="get-login-password"):
                await none.list_repositories()
        finally:
            await none.aclose()


async def test_unknown_adapters_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown registry adapter 'quay'"):
        await default_adapters().open(RegistrySource("oci://quay.io", adapter="quay"))
