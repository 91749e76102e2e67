"""ModelCache.load_known: the stat-only re-check of a manifest parsed before."""

from __future__ import annotations

import os
from pathlib import Path

from flexinfer_registry.core.cache import ModelCache


def _install(cache: ModelCache, key: str) -> None:
    staging = cache.staging(key)
    (staging / "files" / "sub").mkdir()
    (staging / "files" / "a.bin").write_bytes(b"a" * 100)
    (staging / "files" / "sub" / "b.json").write_bytes(b"{}")
    cache.install(key, key, staging, None, False)


def test_load_known_only_vouches_for_unchanged_complete_models(tmp_path: Path) -> None:
    cache = ModelCache(tmp_path)
    assert cache.load_known("org/m") is None  # never parsed
    _install(cache, "org/m")
    model = cache.load_known("org/m")
    assert model is not None
    assert {f.path for f in model.files} == {"a.bin", "sub/b.json"}
    assert cache.load_known("org/m", max_files=1) is None  # too many files to stat inline
    (model.files_dir / "a.bin").write_bytes(b"short")
    assert cache.load_known("org/m") is None
    assert cache.load("org/m") is None
    (model.files_dir / "a.bin").write_bytes(b"a" * 100)
    (model.files_dir / "sub" / "b.json").unlink()
    assert cache.load_known("org/m") is None
    assert cache.load("org/m") is None
    (model.files_dir / "sub" / "b.json").write_bytes(b"{}")
    assert cache.load("org/m") is not None
    os.utime(model.root / "manifest.json", ns=(1, 1))  # manifest rewritten: parse again
    assert cache.load_known("org/m") is None
    assert cache.load("org/m") is not None
    assert cache.load_known("org/m") is not None


def test_load_known_refuses_a_symlinked_file(tmp_path: Path) -> None:
    cache = ModelCache(tmp_path / "cache")
    _install(cache, "org/m")
    model = cache.load("org/m")
    assert model is not None
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"a" * 100)
    (model.files_dir / "a.bin").unlink()
    (model.files_dir / "a.bin").symlink_to(outside)
    assert cache.load_known("org/m") is None
    assert cache.load("org/m") is None
    assert cache.remove("org/m")
    assert cache.load_known("org/m") is None
