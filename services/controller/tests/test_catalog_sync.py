"""sync(): models pushed into a real registry come back as filtered, sized, pinned entries."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from flexinfer_common.testing.oci_push import ModelPusher, safetensors_bytes
from flexinfer_common.testing.oci_registry import TestRegistry, serve_registry
from flexinfer_controller.catalog.credentials import parse_dockerconfigjson
from flexinfer_controller.catalog.errors import (
    DigestMismatchError,
    InvalidReferenceError,
    RegistryAuthError,
)
from flexinfer_controller.catalog.reference import parse_reference, parse_registry_url
from flexinfer_controller.catalog.resolve import resolve
from flexinfer_controller.catalog.sync import matches, sync, sync_report
from flexinfer_controller.catalog.types import CatalogFilter, CatalogSpec, RegistrySource
from flexinfer_controller.testing import eventually

SMALL = safetensors_bytes({"w": (16, 16)})
LARGE = safetensors_bytes({"w": (64, 64), "b": (64,)})
MODELS = {
    ("models/llama-8b", "v1"): ({"a.safetensors": LARGE}, "chat,llama"),
    ("models/llama-8b", "v2"): (
        {"a.safetensors": LARGE, "b.safetensors": SMALL}, "chat, llama,instruct",
    ),
    ("models/mistral", "v1"): ({"m.safetensors": SMALL}, "chat"),
    ("embeddings/bge", "v1"): ({"e.safetensors": SMALL}, "embed"),
}  # fmt: skip
EMPTY_CONFIG = 2  # the "{}" config blob every image-style artifact carries


@pytest.fixture
async def pushed() -> AsyncIterator[tuple[TestRegistry, str, dict[tuple[str, str], str]]]:
    registry = TestRegistry(max_page=2)
    async with serve_registry(registry) as url:
        pusher = ModelPusher(url)
        digests = {}
        for (repo, tag), (files, tags) in MODELS.items():
            vendor = {"org.opencontainers.image.vendor": "meta"} if "llama" in repo else {}
            annotations = {"flexinfer.ai/tags": tags, **vendor}
            digests[repo, tag] = await pusher.push_model(repo, tag, files, annotations)
        # A cosign-style signature tag: not a model version, never an entry.
        sig = "sha256-" + digests["models/mistral", "v1"][7:] + ".sig"
        await pusher.push_model("models/mistral", sig, {"sig": b"x"}, {"flexinfer.ai/tags": "chat"})
        yield registry, url, digests


def _size(repo: str, tag: str) -> int:
    return sum(len(b) for b in MODELS[repo, tag][0].values()) + EMPTY_CONFIG


async def test_every_model_version_becomes_a_pinned_sized_entry(
    pushed: tuple[TestRegistry, str, dict[tuple[str, str], str]],
) -> None:
    _, url, digests = pushed
    entries = await sync(CatalogSpec((RegistrySource(url),)))
    assert [e.name for e in entries] == [
        "embeddings/bge:v1", "models/llama-8b:v1", "models/llama-8b:v2", "models/mistral:v1",
    ]  # fmt: skip
    host = parse_registry_url(url).registry
    for entry in entries:
        repo, tag = entry.name.split(":")
        assert entry.registry == url
        assert entry.reference == f"oci://{host}/{repo}:{tag}@{digests[repo, tag]}"
        assert parse_reference(entry.reference).digest == digests[repo, tag]
        assert entry.size == _size(repo, tag)


@pytest.mark.parametrize(
    ("flt", "names"),
    [
        (CatalogFilter(tags=("chat", "llama")), ["models/llama-8b:v1", "models/llama-8b:v2"]),
        (CatalogFilter(tags=("instruct",)), ["models/llama-8b:v2"]),
        (CatalogFilter(tags=("chat",), name_pattern="models/m*"), ["models/mistral:v1"]),
        (CatalogFilter(name_pattern="*/bge"), ["embeddings/bge:v1"]),
        (CatalogFilter(tags=("org.opencontainers.image.vendor=meta", "instruct")),
         ["models/llama-8b:v2"]),
        (CatalogFilter(tags=("chat", "embed")), []),
        (CatalogFilter(name_pattern="Models/*"), []),  # the glob is case-sensitive
    ],
)  # fmt: skip
async def test_filters_need_every_tag_and_the_glob(
    pushed: tuple[TestRegistry, str, dict[tuple[str, str], str]],
    flt: CatalogFilter,
    names: list[str],
) -> None:
    _, url, _ = pushed
    entries = await sync(CatalogSpec((RegistrySource(url),), flt))
    assert [e.name for e in entries] == names


def test_an_absent_tag_annotation_matches_no_tag_filter() -> None:
    assert matches(CatalogFilter(), "m", {})
    assert not matches(CatalogFilter(tags=("chat",)), "m", {})
    assert not matches(CatalogFilter(tags=("k=v",)), "m", {"k": "v2"})


async def test_a_tampered_manifest_is_reported_and_skipped(
    pushed: tuple[TestRegistry, str, dict[tuple[str, str], str]],
) -> None:
    registry, url, digests = pushed
    registry.tamper(digests["models/mistral", "v1"], b'{"schemaVersion": 2}')
    report = await sync_report(CatalogSpec((RegistrySource(url),)))
    assert "models/mistral:v1" not in [e.name for e in report.entries]
    assert len(report.entries) == 3
    [(where, error)] = report.failures.items()
    assert where.endswith("/models/mistral:v1")
    assert isinstance(error, DigestMismatchError)
    with pytest.raises(DigestMismatchError):
        await sync(CatalogSpec((RegistrySource(url),)))


async def test_one_registry_failing_leaves_the_others_entries(
    pushed: tuple[TestRegistry, str, dict[tuple[str, str], str]],
) -> None:
    _, url, _ = pushed
    locked = TestRegistry(auth="basic", users={"u": "right"})
    async with serve_registry(locked) as locked_url:
        host = parse_registry_url(locked_url).registry
        wrong = parse_dockerconfigjson({"auths": {host: {"username": "u", "password": "wrong"}}})
        spec = CatalogSpec((RegistrySource(url), RegistrySource(locked_url, wrong)))
        report = await sync_report(spec)
    assert len(report.entries) == 4
    assert list(report.failures) == [locked_url]
    assert isinstance(report.failures[locked_url], RegistryAuthError)


async def test_manifest_requests_stay_within_the_concurrency_bound(
    pushed: tuple[TestRegistry, str, dict[tuple[str, str], str]],
) -> None:
    registry, url, _ = pushed
    pusher = ModelPusher(url)
    for i in range(6):
        await pusher.push_model("models/many", f"v{i}", {"x": SMALL}, {"flexinfer.ai/tags": "x"})
    registry.manifest_gate = gate = asyncio.Event()
    task = asyncio.create_task(sync(CatalogSpec((RegistrySource(url),)), concurrency=3))
    await eventually(lambda: registry.in_flight >= 3)
    gate.set()
    entries = await task
    assert len(entries) == 4 + 6
    assert registry.max_in_flight == 3


async def test_resolve_pins_a_tag_to_its_digest(
    pushed: tuple[TestRegistry, str, dict[tuple[str, str], str]],
) -> None:
    registry, url, digests = pushed
    host = parse_registry_url(url).registry
    resolved = await resolve(f"oci://{host}/models/mistral:v1", plain_http=True)
    assert resolved.reference.digest == digests["models/mistral", "v1"]
    assert resolved.reference.tag == "v1"
    assert resolved.size == _size("models/mistral", "v1")
    assert resolved.annotations["flexinfer.ai/tags"] == "chat"
    registry.requests.clear()
    with pytest.raises(InvalidReferenceError):
        await resolve(f"oci://{host}/models/../etc/passwd:v1", plain_http=True)
    assert registry.requests == []  # refused before any request
