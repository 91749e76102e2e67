"""The OCI client against a real registry on a socket: lists, manifests, digests, errors."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from flexinfer_common.errors import NotFoundError, PermanentError, TemporaryError
from flexinfer_common.serving import serve_in_background
from flexinfer_common.testing.oci_push import ModelPusher, safetensors_bytes
from flexinfer_common.testing.oci_registry import TestRegistry, serve_registry
from flexinfer_controller.catalog.client import OciClient
from flexinfer_controller.catalog.errors import (
    DigestMismatchError,
    RegistryProtocolError,
    RegistryUnavailableError,
)
from flexinfer_controller.catalog.manifest import OCI_ARTIFACT, OCI_INDEX, OCI_MANIFEST
from flexinfer_controller.catalog.reference import parse_registry_url
from flexinfer_controller.catalog.responses import retry_after

WEIGHTS = safetensors_bytes({"w": (64, 32), "b": (32,)})


@pytest.fixture
def registry() -> TestRegistry:
    return TestRegistry(max_page=2)


@pytest.fixture
async def url(registry: TestRegistry) -> AsyncIterator[str]:
    async with serve_registry(registry) as base:
        yield base


@pytest.fixture
async def client(url: str) -> AsyncIterator[OciClient]:
    async with OciClient(parse_registry_url(url)) as c:
        yield c


async def test_ping_catalog_and_tags_follow_link_pagination(
    client: OciClient, url: str, registry: TestRegistry
) -> None:
    pusher = ModelPusher(url)
    names = ["models/a", "models/b", "models/c", "other/d", "models/e"]
    for name in names:
        await pusher.push_model(name, "v1", {"model.safetensors": WEIGHTS})
    for tag in ("v2", "v3", "v4"):
        await pusher.push_model("models/a", tag, {"model.safetensors": WEIGHTS})
    await client.ping()
    registry.requests.clear()
    assert await client.catalog(page_size=100) == sorted(names)
    # The server caps pages at 2: five repositories take three pages, each a request.
    assert [p for _, p, _ in registry.requests] == ["/v2/_catalog"] * 3
    assert await client.tags("models/a") == ["v1", "v2", "v3", "v4"]


async def test_a_tag_resolves_to_the_pushed_digest_and_size(client: OciClient, url: str) -> None:
    pusher = ModelPusher(url)
    annotations = {"flexinfer.ai/tags": "chat,8b", "org.opencontainers.image.vendor": "meta"}
    files = {"model.safetensors": WEIGHTS, "tokenizer.json": b'{"v": 1}'}
    digest = await pusher.push_model("models/llama", "v1", files, annotations)
    manifest = await client.manifest("models/llama", "v1")
    assert manifest.digest == digest
    assert manifest.media_type == OCI_MANIFEST
    assert manifest.annotations == annotations
    assert manifest.artifact_type == "application/vnd.flexinfer.model.v1"
    assert await client.total_size("models/llama", manifest) == len(WEIGHTS) + 8 + 2  # + "{}"
    head = await client.head_manifest("models/llama", "v1")
    assert (head.digest, head.media_type, head.size) == (digest, OCI_MANIFEST, manifest.size)
    by_digest = await client.manifest("models/llama", digest)
    assert by_digest == manifest


async def test_artifact_manifests_and_indexes_are_sized_through_their_blobs(
    client: OciClient, url: str
) -> None:
    pusher = ModelPusher(url)
    first = await pusher.push_model("m", "a", {"x.safetensors": WEIGHTS}, artifact_manifest=True)
    second = await pusher.push_model("m", "b", {"y.safetensors": WEIGHTS + WEIGHTS})
    artifact = await client.manifest("m", "a")
    assert artifact.media_type == OCI_ARTIFACT
    assert artifact.digest == first
    sizes = {first: artifact.size, second: (await client.manifest("m", "b")).size}
    await pusher.push_index("m", "all", sizes, {"flexinfer.ai/tags": "multi"})
    index = await client.manifest("m", "all")
    assert index.media_type == OCI_INDEX
    assert index.is_index
    assert await client.total_size("m", index) == len(WEIGHTS) + 2 * len(WEIGHTS) + 2


async def test_content_that_does_not_hash_to_its_digest_is_refused(
    client: OciClient, url: str, registry: TestRegistry
) -> None:
    digest = await ModelPusher(url).push_model("m", "v1", {"x": WEIGHTS})
    registry.tamper(digest, b'{"schemaVersion": 2, "mediaType": "' + OCI_MANIFEST.encode() + b'"}')
    with pytest.raises(DigestMismatchError) as by_tag:
        await client.manifest("m", "v1")
    assert by_tag.value.expected == digest
    assert isinstance(by_tag.value, PermanentError)
    with pytest.raises(DigestMismatchError):
        await client.manifest("m", digest)


async def test_unknown_names_are_not_found(client: OciClient, url: str) -> None:
    await ModelPusher(url).push_model("m", "v1", {"x": WEIGHTS})
    with pytest.raises(NotFoundError, match="MANIFEST_UNKNOWN"):
        await client.manifest("m", "v9")
    with pytest.raises(NotFoundError, match="NAME_UNKNOWN"):
        await client.tags("nope")


async def test_throttling_is_temporary_with_the_retry_after_delay(
    client: OciClient, registry: TestRegistry
) -> None:
    registry.throttle(1, retry_after="7")
    with pytest.raises(RegistryUnavailableError) as caught:
        await client.catalog()
    assert isinstance(caught.value, TemporaryError)
    assert caught.value.delay == 7.0
    assert "TOOMANYREQUESTS" in str(caught.value)
    assert await client.catalog() == []  # the next request is served


def test_retry_after_reads_seconds_and_http_dates() -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    date = format_datetime(now + timedelta(seconds=90), usegmt=True)

    def respond(value: str) -> httpx.Response:
        return httpx.Response(429, headers={"Retry-After": value})

    assert retry_after(respond("12")) == 12.0
    assert retry_after(respond(date), now=now) == 90.0
    assert retry_after(respond("soon")) == 5.0
    assert retry_after(respond("999999")) == 3600.0


async def test_a_closed_port_is_temporary() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with OciClient(parse_registry_url(f"http://127.0.0.1:{port}")) as client:
        with pytest.raises(RegistryUnavailableError, match="ConnectError"):
            await client.ping()


async def test_a_server_without_v2_is_not_a_registry() -> None:
    async with serve_in_background(Starlette()) as base:
        client = OciClient(parse_registry_url(base))
        async with client:
            with pytest.raises(RegistryProtocolError, match="not an OCI registry"):
                await client.ping()


async def test_pagination_never_follows_a_link_off_the_registry() -> None:
    async def catalog(request: Request) -> Response:
        link = '<https://elsewhere.example/v2/_catalog?last=a>; rel="next"'
        return JSONResponse({"repositories": ["a"]}, headers={"Link": link})

    app = Starlette(routes=[Route("/v2/_catalog", catalog)])
    async with serve_in_background(app) as base:
        client = OciClient(parse_registry_url(base))
        async with client:
            with pytest.raises(RegistryProtocolError, match="pagination leaves the registry"):
                await client.catalog()
