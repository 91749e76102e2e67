"""Local mode's pre-start step: the path an engine is launched with."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from flexinfer_controller.flashload import FlashLoadSettings, InsufficientSpaceError, prepare
from flexinfer_controller.flashload.local import default_key
from flexinfer_controller.flashload.plan import safe_name
from flexinfer_controller.flashload.testing import FixedSpace, make_model, tree_digest


@pytest.fixture
def source(tmp_path: Path) -> Path:
    (tmp_path / "shm").mkdir()
    return make_model(tmp_path / "models" / "Llama-3.2_1B", [300_000])


def on(tmp_path: Path, *, fallback: bool = True) -> FlashLoadSettings:
    return FlashLoadSettings(
        enabled=True, dest=tmp_path / "shm", margin_mb=0, fallback_to_source=fallback
    )


def test_off_launches_from_the_model_directory(source: Path, tmp_path: Path) -> None:
    settings = FlashLoadSettings(dest=tmp_path / "shm")
    assert prepare(source, settings) == source
    assert list((tmp_path / "shm").iterdir()) == []


def test_on_launches_from_the_tmpfs_copy(source: Path, tmp_path: Path) -> None:
    launch = prepare(source, on(tmp_path), key="default/llama")
    assert launch == tmp_path / "shm" / "default_llama"
    assert tree_digest(launch) == tree_digest(source)
    assert prepare(source, on(tmp_path), key="default/llama") == launch  # reused


def test_a_model_file_launches_from_its_copy(tmp_path: Path) -> None:
    (tmp_path / "shm").mkdir()
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF" + bytes(1000))
    launch = prepare(gguf, on(tmp_path), key="default/tiny")
    assert launch == tmp_path / "shm" / "default_tiny" / "tiny.gguf"
    assert launch.read_bytes() == gguf.read_bytes()


def test_without_a_key_the_name_comes_from_the_path(source: Path, tmp_path: Path) -> None:
    key = default_key(source)
    assert key.startswith("llama-3-2-1b-")
    assert safe_name(key) == key
    assert default_key(source) == key
    assert default_key(tmp_path / "elsewhere" / source.name) != key
    assert prepare(source, on(tmp_path)) == tmp_path / "shm" / key


def test_no_room_falls_back_to_the_source(
    source: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, "flexinfer_controller.flashload"):
        assert prepare(source, on(tmp_path), key="default/llama", space=FixedSpace(0)) == source
    assert "launching from" in caplog.text
    assert not (tmp_path / "shm" / "default_llama").exists()


def test_no_room_without_the_fallback_is_an_error(source: Path, tmp_path: Path) -> None:
    settings = on(tmp_path, fallback=False)
    with pytest.raises(InsufficientSpaceError):
        prepare(source, settings, key="default/llama", space=FixedSpace(0))


def test_a_model_already_on_the_tmpfs_is_launched_as_it_is(source: Path, tmp_path: Path) -> None:
    launch = prepare(source, on(tmp_path), key="default/llama")
    assert prepare(launch, on(tmp_path), key="default/other") == launch


def test_the_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEXINFER_FLASH_LOADER_ENABLED", "true")
    monkeypatch.setenv("FLEXINFER_FLASH_LOADER_CONCURRENCY", "8")
    monkeypatch.setenv("FLEXINFER_FLASH_LOADER_EXCLUDE", '["*.pth"]')
    settings = FlashLoadSettings()
    assert (settings.enabled, settings.concurrency, settings.exclude) == (True, 8, ["*.pth"])
    assert settings.buffer_bytes == 4096 * 1024
    assert settings.chunk_bytes == 64 << 20
