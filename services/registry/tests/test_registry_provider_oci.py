"""The OCI provider against a real in-process OCI distribution server (no mocks)."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from flexinfer_common.errors import InvalidSpecError, NotFoundError
from flexinfer_common.testing.oci_push import (
    DOCKER_MANIFEST,
    EMPTY_CONFIG,
    ModelPusher,
    digest_of,
    safetensors_bytes,
)
from flexinfer_common.testing.oci_registry import TestRegistry, serve_registry
from flexinfer_registry.adapters.providers.oci import OciProvider
from flexinfer_registry.adapters.providers.oci_artifact import (
    OciReference,
    UnsupportedArtifactError,
    parse_reference,
)
from flexinfer_registry.core.providers.base import (
    AccessDeniedError,
    ChecksumMismatchError,
    ProviderConfig,
    SourceNotAllowedError,
    SourceUnreachableError,
    UnsafePathError,
)

FILES = {
    "config.json": b'{"model_type": "tiny"}',
    "model.safetensors": safetensors_bytes({"w": (64, 64)}),
    "tokenizer/vocab.txt": b"a\nb\nc\n",
}


def _files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by relative path (small test trees: blocking is fine)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@dataclass
class Running:
    registry: TestRegistry
    url: str

    @property
    def host(self) -> str:
        return self.url.removeprefix("http://")

    def provider(self, auth_file: Path | None = None) -> OciProvider:
        """A provider that may reach this registry over plain http."""
        insecure = frozenset({self.host})
        return OciProvider(
            ProviderConfig(timeout_s=5.0, oci_insecure_registries=insecure, oci_auth_file=auth_file)
        )


@pytest.fixture
async def oci() -> AsyncIterator[Running]:
    registry = TestRegistry()
    async with serve_registry(registry) as url:
        await ModelPusher(url).push_model("org/tiny", "v1", FILES)
        yield Running(registry, url)


def test_references() -> None:
    assert parse_reference("oci://ghcr.io/org/m:v1") == OciReference("ghcr.io", "org/m", "v1")
    assert parse_reference("OCI://Reg.io:5000/a/b/c") == OciReference("reg.io:5000", "a/b/c",
                                                                      "latest")  # fmt: skip
    pinned = parse_reference("oci://h/r@sha256:" + "a" * 64)
    assert pinned.pinned
    assert pinned.reference == "sha256:" + "a" * 64
    assert parse_reference("oci://h/r", "v2").reference == "v2"
    for bad in (
        "oci://",
        "oci://h",
        "oci://h/",
        "oci://h/Upper",
        "oci://h/r:bad tag",
        "oci://h/r@sha256:short",
        "oci://h/../r",
        "oci://-h/r",
        "s3://h/r",
    ):
        with pytest.raises(InvalidSpecError):
            parse_reference(bad)
    with pytest.raises(InvalidSpecError, match="differs"):
        parse_reference("oci://h/r:v1", "v2")


async def test_by_tag_every_layer_becomes_its_titled_file(oci: Running, tmp_path: Path) -> None:
    seen: list[tuple[int, int | None]] = []
    result = await oci.provider().download(
        f"oci://{oci.host}/org/tiny:v1", None, tmp_path, progress=lambda d, t: seen.append((d, t))
    )
    manifest = oci.registry.tags["org/tiny"]["v1"]
    assert result.resolved_revision == manifest
    assert {f.path: f.checksum for f in result.files} == {p: digest_of(d) for p, d in FILES.items()}
    assert _files(tmp_path) == FILES  # no temporary files left beside them
    assert seen[-1] == (result.total_size, result.total_size)


async def test_by_digest_and_without_weights(oci: Running, tmp_path: Path) -> None:
    manifest = oci.registry.tags["org/tiny"]["v1"]
    result = await oci.provider().download(
        f"oci://{oci.host}/org/tiny@{manifest}", None, tmp_path, ignore_weights=True
    )
    assert result.resolved_revision == manifest
    assert [f.path for f in result.files] == ["config.json", "tokenizer/vocab.txt"]
    assert ("GET", f"/v2/org/tiny/manifests/{manifest}", "") in oci.registry.requests


async def test_a_docker_manifest_and_a_one_model_index(oci: Running, tmp_path: Path) -> None:
    pusher = ModelPusher(oci.url)
    config = await pusher.push_blob("org/docker", EMPTY_CONFIG)
    layer = await pusher.push_blob("org/docker", b"weights")
    doc = {
        "schemaVersion": 2,
        "mediaType": DOCKER_MANIFEST,
        "config": {**config, "mediaType": "application/vnd.docker.container.image.v1+json"},
        "layers": [{**layer, "mediaType": "application/octet-stream",
                    "annotations": {"org.opencontainers.image.title": "w.bin"}}],
    }  # fmt: skip
    child = await pusher.push_manifest("org/docker", "v1", doc)
    size = len(oci.registry.manifests["org/docker"][child][1])
    index = await pusher.push_index("org/docker", "multi", {child: size}, {})
    result = await oci.provider().download(f"oci://{oci.host}/org/docker:multi", None, tmp_path)
    assert result.resolved_revision == index
    assert (tmp_path / "w.bin").read_bytes() == b"weights"


async def test_an_index_of_several_models_is_refused(oci: Running, tmp_path: Path) -> None:
    pusher = ModelPusher(oci.url)
    first = oci.registry.tags["org/tiny"]["v1"]
    second = await pusher.push_model("org/tiny", "v2", {"a.json": b"{}"})
    sizes = {d: len(oci.registry.manifests["org/tiny"][d][1]) for d in (first, second)}
    await pusher.push_index("org/tiny", "both", sizes, {})
    with pytest.raises(UnsupportedArtifactError, match="name one by digest"):
        await oci.provider().download(f"oci://{oci.host}/org/tiny:both", None, tmp_path)


async def test_a_corrupted_blob_fails_and_leaves_nothing(oci: Running, tmp_path: Path) -> None:
    weights = digest_of(FILES["model.safetensors"])
    oci.registry.tamper_blob(weights, b"\xff" + FILES["model.safetensors"][1:])
    with pytest.raises(ChecksumMismatchError, match="sha256 mismatch"):
        await oci.provider().download(f"oci://{oci.host}/org/tiny:v1", None, tmp_path)
    assert not (tmp_path / "model.safetensors").exists()
    assert not [p for p in _files(tmp_path) if ".oci-partial" in p]


async def test_a_blob_longer_than_announced_is_cut_off(oci: Running, tmp_path: Path) -> None:
    oci.registry.tamper_blob(digest_of(FILES["config.json"]), FILES["config.json"] * 1000)
    with pytest.raises(ChecksumMismatchError, match="longer than"):
        await oci.provider().download(f"oci://{oci.host}/org/tiny:v1", None, tmp_path)
    assert not (tmp_path / "config.json").exists()


@pytest.mark.parametrize("title", ["../escape", "/etc/passwd", "a/../../b", "nul\x00byte", "a\\b"])
async def test_a_hostile_title_is_refused(oci: Running, tmp_path: Path, title: str) -> None:
    await ModelPusher(oci.url).push_model("org/evil", "v1", {title: b"x", "ok.json": b"{}"})
    with pytest.raises(UnsafePathError):
        await oci.provider().download(f"oci://{oci.host}/org/evil:v1", None, tmp_path / "d")
    assert not (tmp_path / "escape").exists()
    assert not (tmp_path / "d").exists() or not any((tmp_path / "d").iterdir())


async def test_a_layer_without_a_title_is_refused(oci: Running, tmp_path: Path) -> None:
    pusher = ModelPusher(oci.url)
    config = await pusher.push_blob("org/image", EMPTY_CONFIG)
    layer = await pusher.push_blob("org/image", b"rootfs")
    doc = {
        "schemaVersion": 2,
        "mediaType": DOCKER_MANIFEST,
        "config": {**config, "mediaType": "application/vnd.docker.container.image.v1+json"},
        "layers": [{**layer, "mediaType": "application/vnd.docker.image.rootfs.diff.tar"}],
    }
    await pusher.push_manifest("org/image", "v1", doc)
    with pytest.raises(UnsupportedArtifactError, match=r"no org\.opencontainers\.image\.title"):
        await oci.provider().download(f"oci://{oci.host}/org/image:v1", None, tmp_path)


async def test_missing_repository_tag_and_unreachable(oci: Running, tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="MANIFEST_UNKNOWN"):
        await oci.provider().download(f"oci://{oci.host}/org/tiny:nope", None, tmp_path)
    oci.registry.throttle(2, retry_after="3")
    with pytest.raises(SourceUnreachableError, match="HTTP 429") as caught:
        await oci.provider().download(f"oci://{oci.host}/org/tiny:v1", None, tmp_path)
    assert caught.value.delay == 3.0


async def test_https_unless_listed_as_insecure(oci: Running, tmp_path: Path) -> None:
    plain = OciProvider(ProviderConfig(timeout_s=5.0))
    before = len(oci.registry.requests)
    with pytest.raises(SourceUnreachableError):  # a TLS handshake with a plain http server
        await plain.download(f"oci://{oci.host}/org/tiny:v1", None, tmp_path)
    assert len(oci.registry.requests) == before  # no request got through in the clear


@pytest.fixture
async def bearer() -> AsyncIterator[Running]:
    registry = TestRegistry(auth="bearer", users={"alice": "s3cret"})
    async with serve_registry(registry) as url:
        await ModelPusher(url, "alice", "s3cret").push_model("org/private", "v1", FILES)
        yield Running(registry, url)


def _auth_file(path: Path, host: str, user: str, password: str) -> Path:
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    path.write_text(json.dumps({"auths": {f"https://{host}/v1/": {"auth": auth}}}))
    return path


async def test_bearer_tokens_with_credentials(bearer: Running, tmp_path: Path) -> None:
    auth = _auth_file(tmp_path / "config.json", bearer.host, "alice", "s3cret")
    provider = bearer.provider(auth_file=auth)
    result = await provider.download(f"oci://{bearer.host}/org/private:v1", None, tmp_path / "d")
    assert {f.path for f in result.files} == set(FILES)
    asked = bearer.registry.token_requests[-1]
    assert asked["user"] == "alice"
    assert asked["scopes"] == ["repository:org/private:pull"]


async def test_bearer_without_or_with_wrong_credentials(bearer: Running, tmp_path: Path) -> None:
    with pytest.raises(AccessDeniedError, match="HTTP 401") as caught:
        await bearer.provider().download(f"oci://{bearer.host}/org/private:v1", None, tmp_path)
    assert "s3cret" not in str(caught.value)
    wrong = _auth_file(tmp_path / "config.json", bearer.host, "alice", "wrong-password")
    with pytest.raises(AccessDeniedError, match="token from") as caught:
        await bearer.provider(auth_file=wrong).download(
            f"oci://{bearer.host}/org/private:v1", None, tmp_path
        )
    assert "wrong-password" not in str(caught.value)


async def test_a_plain_http_realm_needs_its_host_listed(bearer: Running, tmp_path: Path) -> None:
    # A token service on another host, in the clear: the registry is listed, the realm not.
    bearer.registry.realm = bearer.url.replace("127.0.0.1", "localhost") + "/token"
    with pytest.raises(SourceNotAllowedError, match="plain http"):
        await bearer.provider().download(f"oci://{bearer.host}/org/private:v1", None, tmp_path)
    # Only the pusher's tokens: the provider never asked the unlisted realm.
    assert all(r["user"] == "alice" for r in bearer.registry.token_requests)
