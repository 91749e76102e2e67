"""The NGC provider against the local fixture: files manifest, presigned URLs, blake3 fallback."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flexinfer_common.errors import InvalidSpecError, NotFoundError
from flexinfer_registry.adapters.providers.ngc import NgcArtifact, NgcProvider, parse_ngc_name
from flexinfer_registry.core.providers.base import (
    AccessDeniedError,
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

FILES = {"config.json": b"{}", "model.safetensors": b"n" * 2048, "sub/tok.json": b"t"}


@pytest.fixture
def ngc() -> Iterator[ProviderFixture]:
    state = FixtureState()
    state.add_ngc("nvidia/llm/models/mymodel/1.0", FILES)
    state.add_ngc("nvidia/models/plain/2", {"a.json": b"a"}, blake3_manifest=False)
    with provider_fixture(state) as running:
        yield running


def provider(fixture: ProviderFixture, **env: str) -> NgcProvider:
    return NgcProvider(ProviderConfig(env=fixture.env(**env), timeout_s=5.0))


def test_parse_names() -> None:
    assert parse_ngc_name("ngc://nim/nvidia/llama:1.0") == NgcArtifact(
        "nim", "nvidia", "models", "llama", "1.0"
    )
    assert parse_ngc_name("org/name/v") == NgcArtifact("org", None, "models", "name", "v")
    assert parse_ngc_name("o/t/resources/n/v").kind == "resources"
    for bad in ("org/name", "a/../b/c", "a/b/c/d/e/f", "a//b/c"):
        with pytest.raises(InvalidSpecError):
            parse_ngc_name(bad)


async def test_presigned_manifest_path(ngc: ProviderFixture, tmp_path: Path) -> None:
    result = await provider(ngc).download("ngc://nvidia/llm/mymodel:1.0", None, tmp_path)
    assert result.resolved_revision == "1.0"
    assert [f.path for f in result.files] == ["config.json", "model.safetensors", "sub/tok.json"]
    assert all(f.checksum.startswith("blake3:") for f in result.files)
    assert (tmp_path / "sub" / "tok.json").read_bytes() == b"t"
    requests = ngc.state.requests
    assert "GET /token" in requests  # a non-nvapi key is exchanged for a Bearer token
    assert "GET /v2/org/nvidia/team/llm/models/mymodel/1.0/files" in requests
    assert sum(r.startswith("GET /presigned/") for r in requests) == 4  # 3 files + checksums


async def test_personal_key_is_used_directly(ngc: ProviderFixture, tmp_path: Path) -> None:
    ngc.state.ngc_token = "nvapi-personal"
    await provider(ngc, NGC_API_KEY="nvapi-personal").download(
        "nvidia/llm/mymodel/1.0", None, tmp_path
    )
    assert "GET /token" not in ngc.state.requests


async def test_checksums_fallback_when_listing_gated(ngc: ProviderFixture, tmp_path: Path) -> None:
    ngc.state.ngc_listing_status = 401
    result = await provider(ngc).download(
        "nvidia/llm/mymodel/1.0", None, tmp_path, ignore_weights=True
    )
    assert [f.path for f in result.files] == ["config.json", "sub/tok.json"]
    assert any(r.endswith("/versions/1.0/files/checksums.blake3") for r in ngc.state.requests)
    assert not any(r.startswith("GET /presigned/") for r in ngc.state.requests)


async def test_blake3_mismatch(ngc: ProviderFixture, tmp_path: Path) -> None:
    ngc.state.corrupt.add("model.safetensors")
    with pytest.raises(ChecksumMismatchError, match="blake3"):
        await provider(ngc).download("nvidia/llm/mymodel/1.0", None, tmp_path)
    assert not (tmp_path / "model.safetensors").exists()


async def test_without_checksums_size_is_checked(ngc: ProviderFixture, tmp_path: Path) -> None:
    result = await provider(ngc).download("nvidia/plain/2", None, tmp_path)
    assert [(f.path, f.checksum) for f in result.files] == [("a.json", "size")]


async def test_missing_and_unauthorised(ngc: ProviderFixture, tmp_path: Path) -> None:
    with pytest.raises(NotFoundError):
        await provider(ngc).download("nvidia/llm/nope/1.0", None, tmp_path)
    with pytest.raises(AccessDeniedError, match="NGC_API_KEY"):
        await provider(ngc, NGC_API_KEY="").download("nvidia/llm/mymodel/1.0", None, tmp_path)


async def test_traversal_in_checksums_rejected(ngc: ProviderFixture, tmp_path: Path) -> None:
    ngc.state.ngc["nvidia/llm/models/evil/1"] = {
        "checksums.blake3": b"00  ../../escape\n",
        "../../escape": b"x",
    }
    ngc.state.ngc_listing_status = 400
    with pytest.raises(UnsafePathError):
        await provider(ngc).download("nvidia/llm/evil/1", None, tmp_path / "d")
    assert not (tmp_path / "escape").exists()


async def test_unreachable_is_quick(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    env = {"NGC_API_ENDPOINT": url, "NGC_AUTH_ENDPOINT": url, "NGC_API_KEY": "nvapi-x"}
    started = time.monotonic()
    with pytest.raises(SourceUnreachableError, match="cannot connect"):
        await NgcProvider(ProviderConfig(env=env)).download("o/n/v", None, tmp_path)
    assert time.monotonic() - started < 5
