"""The provider registry and the local file provider."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from flexinfer_common.errors import InvalidSpecError, NotFoundError, PermanentError
from flexinfer_registry.adapters.providers import builtin_providers
from flexinfer_registry.adapters.providers.local import LocalProvider
from flexinfer_registry.core.providers.base import (
    DownloadResult,
    ModelProvider,
    ProgressCallback,
    ProviderConfig,
    SourceNotAllowedError,
)
from flexinfer_registry.core.providers.files import is_weight_file, safe_relative_path
from flexinfer_registry.core.providers.registry import ProviderRegistry


def _model(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / "config.json").write_text('{"a": 1}')
    (root / "model.safetensors").write_bytes(b"w" * 1000)
    (root / "sub" / "tokenizer.json").write_text("{}")
    return root


def local(*roots: Path) -> LocalProvider:
    """A local provider allowed to read under ``roots``."""
    return LocalProvider(ProviderConfig(file_roots=roots))


async def test_local_copies_every_file_with_sizes(tmp_path: Path) -> None:
    src = _model(tmp_path / "src")
    seen: list[tuple[int, int | None]] = []
    result = await local(tmp_path).download(
        f"file://{src}", None, tmp_path / "dest", progress=lambda d, t: seen.append((d, t))
    )
    assert [f.path for f in result.files] == [
        "config.json",
        "model.safetensors",
        "sub/tokenizer.json",
    ]
    assert (tmp_path / "dest" / "model.safetensors").read_bytes() == b"w" * 1000
    assert result.total_size == 1000 + 8 + 2
    assert seen[-1] == (result.total_size, result.total_size)


def _other_filesystem(tmp_path: Path) -> Path:
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on a filesystem of its own")
    return shm


async def test_local_copies_across_filesystems(tmp_path: Path) -> None:
    """A source on another filesystem than the cache (no hard link possible) is copied."""
    shm = _other_filesystem(tmp_path)
    with tempfile.TemporaryDirectory(dir=shm) as other:
        src = _model(Path(other) / "src")
        result = await local(Path(other)).download(f"file://{src}", None, tmp_path / "dest")
        assert (tmp_path / "dest" / "model.safetensors").read_bytes() == b"w" * 1000
        assert os.stat(tmp_path / "dest" / "model.safetensors").st_nlink == 1
    assert result.total_size == 1010


async def test_local_ignore_weights(tmp_path: Path) -> None:
    src = _model(tmp_path / "src")
    result = await local(tmp_path).download(
        f"file://{src}", None, tmp_path / "dest", ignore_weights=True
    )
    assert "model.safetensors" not in [f.path for f in result.files]
    assert not (tmp_path / "dest" / "model.safetensors").exists()


async def test_local_missing_path_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="does not exist"):
        await local(tmp_path).download(f"file://{tmp_path}/nope", None, tmp_path / "d")
    with pytest.raises(NotFoundError, match="does not exist"):
        await local(tmp_path).check(f"file://{tmp_path}/nope")


async def test_local_rejects_relative_and_remote_hosts(tmp_path: Path) -> None:
    with pytest.raises(InvalidSpecError):
        await local(tmp_path).download("file://evil.example/x", None, tmp_path / "d")
    with pytest.raises(InvalidSpecError):
        await local(tmp_path).download("relative/path", None, tmp_path / "d")


async def test_local_without_roots_refuses_every_file_url(tmp_path: Path) -> None:
    """The old provider read any directory its process could: a planted secret was served."""
    src = _model(tmp_path / "src")
    with pytest.raises(SourceNotAllowedError, match="no file roots"):
        await LocalProvider().download(f"file://{src}", None, tmp_path / "dest")
    with pytest.raises(SourceNotAllowedError):
        await LocalProvider().check(f"file://{src}")
    assert not (tmp_path / "dest").exists()


async def test_local_refuses_symlink_out_of_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    src = _model(root / "src")
    (tmp_path / "secret").write_text("s")
    os.symlink(tmp_path / "secret", src / "leak.json")
    with pytest.raises(SourceNotAllowedError, match="out of the file root"):
        await local(root).download(f"file://{src}", None, tmp_path / "dest")
    with pytest.raises(SourceNotAllowedError, match="out of the file root"):
        await local(root).check(f"file://{src}")
    assert not (tmp_path / "dest" / "leak.json").exists()


async def test_local_follows_symlinks_that_stay_under_the_root(tmp_path: Path) -> None:
    """A Hugging Face cache snapshot: every file a symlink to ../../blobs/<hash>."""
    root = tmp_path / "hub"
    (root / "blobs").mkdir(parents=True)
    (root / "blobs" / "abc").write_text('{"a": 1}')
    snapshot = root / "snapshots" / "0123"
    snapshot.mkdir(parents=True)
    os.symlink("../../blobs/abc", snapshot / "config.json")
    result = await local(root).download(f"file://{snapshot}", None, tmp_path / "dest")
    assert [f.path for f in result.files] == ["config.json"]
    assert (tmp_path / "dest" / "config.json").read_text() == '{"a": 1}'


async def test_local_source_reached_through_a_symlinked_dir_out_of_the_root(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    outside = _model(tmp_path / "outside")
    os.symlink(outside, root / "model")
    with pytest.raises(SourceNotAllowedError, match="outside"):
        await local(root).check(f"file://{root}/model")
    with pytest.raises(SourceNotAllowedError):
        await local(root).download(f"file://{root}/model", None, tmp_path / "dest")


async def test_local_skips_fifos_and_symlinked_dirs(tmp_path: Path) -> None:
    """A FIFO would block the copy forever; a symlinked directory is not descended."""
    src = _model(tmp_path / "src")
    os.mkfifo(src / "pipe")
    os.symlink(src / "sub", src / "again")
    result = await local(tmp_path).download(f"file://{src}", None, tmp_path / "dest")
    assert [f.path for f in result.files] == [
        "config.json",
        "model.safetensors",
        "sub/tokenizer.json",
    ]


@pytest.mark.parametrize(
    "name", ["", "../x", "a/../../x", "/etc/passwd", "a\\b", "a\x00b", "C:x", ".", "a/./.."]
)
def test_safe_relative_path_rejects(name: str) -> None:
    with pytest.raises(PermanentError):
        safe_relative_path(name)


def test_safe_relative_path_normalises() -> None:
    assert safe_relative_path("./a//b/c.json") == "a/b/c.json"
    assert is_weight_file("x/model-00001.SAFETENSORS")
    assert not is_weight_file("config.json")


class _Fake(ModelProvider):
    name = "fake"

    async def download(
        self,
        model_name: str,
        revision: str | None,
        dest_dir: Path,
        *,
        ignore_weights: bool = False,
        progress: ProgressCallback | None = None,
    ) -> DownloadResult:
        return DownloadResult(resolved_revision=revision)


def test_registry_picks_by_scheme_then_enum() -> None:
    registry = ProviderRegistry()
    assert registry.name_for("s3://bucket/prefix", 0) == "s3"
    assert registry.name_for("gs://bucket/prefix", 0) == "gcs"
    assert registry.name_for("ngc://org/model:1", 0) == "ngc"
    assert registry.name_for("file:///models/x", 3) == "file"
    assert registry.name_for("org/model", 0) == "huggingface"
    assert registry.name_for("org/model", 1) == "ngc"
    assert registry.name_for("org/model", 2) == "gcs"
    assert registry.name_for("org/model", 3) == "s3"
    with pytest.raises(InvalidSpecError, match="scheme"):
        registry.name_for("ftp://x/y", 0)
    with pytest.raises(InvalidSpecError, match="ModelProvider"):
        registry.name_for("org/model", 9)


def test_registry_builds_once_and_accepts_new_factories() -> None:
    registry = builtin_providers(ProviderConfig(timeout_s=1.0))
    assert registry.provider_for("file:///x") is registry.provider_for("file:///y")
    registry.register("huggingface", lambda config: _Fake())
    assert registry.provider_for("org/model").name == "fake"
    with pytest.raises(InvalidSpecError, match="unknown provider"):
        registry.get("nope")
