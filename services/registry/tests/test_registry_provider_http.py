"""Hugging Face and GCS providers against the local fixture speaking their real protocols."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flexinfer_common.errors import NotFoundError
from flexinfer_registry.adapters.providers.gcs import GcsProvider
from flexinfer_registry.adapters.providers.huggingface import HuggingFaceProvider
from flexinfer_registry.core.providers.base import (
    ChecksumMismatchError,
    ProviderConfig,
    SourceUnreachableError,
    UnsafePathError,
)
from flexinfer_registry.testing.provider_fixtures import (
    FixtureState,
    ProviderFixture,
    provider_fixture,
)

SHA1 = "1" * 40
SHA2 = "2" * 40
V1 = {"config.json": b'{"v": 1}', "model.safetensors": b"\x01" * 4096, "tok/vocab.txt": b"a\nb"}
V2 = {"config.json": b'{"v": 2}', "model.safetensors": b"\x02" * 4096}


@pytest.fixture
def fixture() -> Iterator[ProviderFixture]:
    state = FixtureState()
    state.add_hf("org/model", SHA1, V1)
    state.add_hf("org/model", SHA2, V2)  # main moves on to the second commit
    state.gcs["bucket"] = {
        "models/m/config.json": b"{}",
        "models/m/model.safetensors": b"w" * 3000,
        "models/m/sub/merges.txt": b"m",
        "models/m/.hidden": b"h",
        "models/m/README.md": b"r",
        "models/m/logo.png": b"p",
        "models/other/x.json": b"x",
    }
    with provider_fixture(state) as running:
        yield running


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def hf(fixture: ProviderFixture, **kw: object) -> HuggingFaceProvider:
    return HuggingFaceProvider(ProviderConfig(env=fixture.env(), timeout_s=5.0), **kw)  # type: ignore[arg-type]


async def test_hf_downloads_main_and_verifies(fixture: ProviderFixture, tmp_path: Path) -> None:
    seen: list[int] = []
    result = await hf(fixture).download(
        "org/model", None, tmp_path, progress=lambda d, t: seen.append(d)
    )
    assert result.resolved_revision == SHA2
    assert {f.path: f.checksum.split(":")[0] for f in result.files} == {
        "config.json": "gitsha1",
        "model.safetensors": "sha256",
    }
    assert (tmp_path / "config.json").read_bytes() == b'{"v": 2}'
    assert not (tmp_path / ".cache").exists()
    assert seen[-1] == result.total_size


async def test_hf_revision_pinning(fixture: ProviderFixture, tmp_path: Path) -> None:
    result = await hf(fixture).download("org/model", SHA1, tmp_path)
    assert result.resolved_revision == SHA1
    assert (tmp_path / "tok" / "vocab.txt").read_bytes() == b"a\nb"
    assert (tmp_path / "config.json").read_bytes() == b'{"v": 1}'
    assert any(f"/resolve/{SHA1}/" in r for r in fixture.state.requests)


async def test_hf_ignore_weights_and_patterns(fixture: ProviderFixture, tmp_path: Path) -> None:
    result = await hf(fixture).download("org/model", SHA1, tmp_path / "a", ignore_weights=True)
    assert [f.path for f in result.files] == ["config.json", "tok/vocab.txt"]
    only = await hf(fixture, allow_patterns=["tok/*"]).download("org/model", SHA1, tmp_path / "b")
    assert [f.path for f in only.files] == ["tok/vocab.txt"]
    assert not any("model.safetensors" in r for r in fixture.state.requests)


async def test_hf_checksum_mismatch(fixture: ProviderFixture, tmp_path: Path) -> None:
    fixture.state.corrupt.add("model.safetensors")
    with pytest.raises(ChecksumMismatchError, match="sha256"):
        await hf(fixture).download("org/model", None, tmp_path)
    assert not (tmp_path / "model.safetensors").exists()


async def test_hf_missing_repo_and_revision(fixture: ProviderFixture, tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="RepositoryNotFound"):
        await hf(fixture).download("org/nope", None, tmp_path)
    with pytest.raises(NotFoundError, match="RevisionNotFound"):
        await hf(fixture).download("org/model", "f" * 40, tmp_path)


async def test_hf_traversal_rejected(fixture: ProviderFixture, tmp_path: Path) -> None:
    fixture.state.add_hf("org/evil", SHA1, {"../../escape.json": b"x", "ok.json": b"{}"})
    with pytest.raises(UnsafePathError):
        await hf(fixture).download("org/evil", None, tmp_path / "d")
    assert not (tmp_path / "escape.json").exists()
    assert not any("resolve" in r for r in fixture.state.requests)


async def test_hf_unreachable_is_quick_and_readable(tmp_path: Path) -> None:
    provider = HuggingFaceProvider(ProviderConfig(env={"HF_ENDPOINT": closed_port_url()}))
    started = time.monotonic()
    with pytest.raises(SourceUnreachableError, match="cannot connect"):
        await provider.download("org/model", None, tmp_path)
    assert time.monotonic() - started < 5


def gcs(fixture: ProviderFixture) -> GcsProvider:
    return GcsProvider(ProviderConfig(env=fixture.env(), timeout_s=5.0))


async def test_gcs_downloads_pages_and_writes_manifest(
    fixture: ProviderFixture, tmp_path: Path
) -> None:
    result = await gcs(fixture).download("gs://bucket/models/m", None, tmp_path)
    assert [f.path for f in result.files] == ["config.json", "model.safetensors", "sub/merges.txt"]
    assert all(f.checksum.startswith("crc32c:") for f in result.files)
    assert not (tmp_path / "README.md").exists()
    assert not (tmp_path / "logo.png").exists()
    manifest = json.loads((tmp_path / ".mx" / "manifest.json").read_text())
    assert manifest["version"] == 1
    assert manifest["model"] == "gs://bucket/models/m"
    assert [f["path"] for f in manifest["files"]] == [f.path for f in result.files]
    assert all(len(f["crc32c"]) == 8 and f["generation"] for f in manifest["files"])
    listed = [r for r in fixture.state.requests if r.endswith("/o")]
    assert len(listed) == 3  # 6 objects under the prefix, 2 per page: paging followed


async def test_gcs_manifest_skips_cached_files(fixture: ProviderFixture, tmp_path: Path) -> None:
    await gcs(fixture).download("gs://bucket/models/m", None, tmp_path)
    fixture.state.requests.clear()
    await gcs(fixture).download("gs://bucket/models/m", None, tmp_path)
    assert not any("alt" in r or "%2F" in r for r in fixture.state.requests if "/o/" in r)


async def test_gcs_ignore_weights(fixture: ProviderFixture, tmp_path: Path) -> None:
    result = await gcs(fixture).download(
        "gs://bucket/models/m", None, tmp_path, ignore_weights=True
    )
    assert "model.safetensors" not in [f.path for f in result.files]


async def test_gcs_crc_mismatch(fixture: ProviderFixture, tmp_path: Path) -> None:
    fixture.state.corrupt.add("models/m/model.safetensors")
    with pytest.raises(ChecksumMismatchError, match="crc32c"):
        await gcs(fixture).download("gs://bucket/models/m", None, tmp_path)
    assert not (tmp_path / "model.safetensors").exists()


async def test_gcs_not_found(fixture: ProviderFixture, tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="HTTP 404"):
        await gcs(fixture).download("gs://nobucket/models/m", None, tmp_path)
    with pytest.raises(NotFoundError, match="no model files"):
        await gcs(fixture).download("gs://bucket/models/none", None, tmp_path)


async def test_gcs_traversal_rejected(fixture: ProviderFixture, tmp_path: Path) -> None:
    fixture.state.gcs["bucket"]["models/m/../../etc/x"] = b"x"
    with pytest.raises(UnsafePathError):
        await gcs(fixture).download("gs://bucket/models/m", None, tmp_path / "d")
    assert not (tmp_path / "d").exists()


async def test_gcs_unreachable(tmp_path: Path) -> None:
    env = {"STORAGE_EMULATOR_HOST": closed_port_url()}
    started = time.monotonic()
    with pytest.raises(SourceUnreachableError, match="cannot connect"):
        await GcsProvider(ProviderConfig(env=env)).download("gs://b/p", None, tmp_path)
    assert time.monotonic() - started < 5
