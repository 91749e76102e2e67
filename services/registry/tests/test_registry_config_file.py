"""The ModelExpress server's YAML config file: mapping, precedence and rejections."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from flexinfer_common.errors import ConfigError
from flexinfer_registry.config_file import (
    parse_human_duration,
    parse_human_size,
    settings_from_config,
)
from flexinfer_registry.settings import RegistrySettings

MODELEXPRESS_DEFAULTS = """
server:
  host: "0.0.0.0"
  port: 8001
cache:
  directory: "./cache"
  max_size_bytes: null
  eviction:
    enabled: true
    policy:
      type: lru
      unused_threshold: "7d"
      max_models: null
      min_free_space_bytes: null
    check_interval: "1h"
logging:
  level: info
  format: pretty
  file: null
  structured: false
"""


def test_modelexpress_default_config_maps_onto_our_settings(tmp_path: Path) -> None:
    path = tmp_path / "mx.yaml"
    path.write_text(MODELEXPRESS_DEFAULTS.replace("max_models: null", "max_models: 12"))
    settings = RegistrySettings(config_file=path)
    assert settings.grpc_host == "0.0.0.0"
    assert settings.grpc_port == 8001
    assert settings.cache_dir == Path("./cache")
    assert settings.eviction_enabled
    assert settings.eviction_unused_threshold_s == 7 * 86400
    assert settings.eviction_interval_s == 3600
    assert settings.eviction_max_models == 12
    assert settings.cache_max_size_bytes is None
    assert settings.eviction_min_free_space_bytes is None
    assert settings.log.level == "INFO"
    assert not settings.log.json_format


def test_cache_size_limits_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "mx.yaml"
    text = MODELEXPRESS_DEFAULTS.replace("max_size_bytes: null", "max_size_bytes: 107374182400")
    path.write_text(text.replace("min_free_space_bytes: null", 'min_free_space_bytes: "10GiB"'))
    settings = RegistrySettings(config_file=path)
    assert settings.cache_max_size_bytes == 100 * 1024**3
    assert settings.eviction_min_free_space_bytes == 10 * 1024**3


def test_cache_size_limits_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "mx.yaml"
    path.write_text("cache: {max_size_bytes: 1000, eviction: {policy: {min_free_space_bytes: 5}}}")
    monkeypatch.setenv("FLEXINFER_REGISTRY_CACHE_MAX_SIZE_BYTES", "50GiB")
    monkeypatch.setenv("FLEXINFER_REGISTRY_EVICTION_MIN_FREE_SPACE_BYTES", "2000000")
    settings = RegistrySettings(config_file=path)
    assert settings.cache_max_size_bytes == 50 * 1024**3, "the environment beats the file"
    assert settings.eviction_min_free_space_bytes == 2_000_000
    monkeypatch.setenv("FLEXINFER_REGISTRY_CACHE_MAX_SIZE_BYTES", "lots")
    with pytest.raises(ValidationError, match="invalid size 'lots'"):
        RegistrySettings()
    monkeypatch.delenv("FLEXINFER_REGISTRY_CACHE_MAX_SIZE_BYTES")
    with pytest.raises(ValidationError, match="greater than or equal to 0"):
        RegistrySettings(eviction_min_free_space_bytes=-1)
    with pytest.raises(ValidationError, match="invalid size True"):
        RegistrySettings(cache_max_size_bytes=True)


def test_flags_and_environment_override_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "mx.yaml"
    path.write_text("server: {port: 9001}\ncache: {eviction: {check_interval: 30m}}\n")
    monkeypatch.setenv("MX_GC_TIMEOUT_SECS", "60")
    monkeypatch.setenv("FLEXINFER_REGISTRY_EVICTION_INTERVAL_S", "5")
    settings = RegistrySettings(config_file=path, grpc_port=0)
    assert settings.grpc_port == 0, "a flag beats the file"
    assert settings.eviction_interval_s == 5, "the environment beats the file"
    assert settings.gc_timeout_s == 60


def test_config_file_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "mx.yaml"
    path.write_text("cache: {eviction: {enabled: false}}\n")
    monkeypatch.setenv("FLEXINFER_REGISTRY_CONFIG_FILE", str(path))
    assert not RegistrySettings().eviction_enabled


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("server: {tls: true}", "unsupported keys: server.tls"),
        ("cache: {eviction: {policy: {type: lfu}}}", "must be lru"),
        ("cache: {max_size_bytes: -1}", "must be a whole number of bytes"),
        ("cache: {max_size_bytes: 1.5}", "must be a whole number of bytes"),
        ("cache: {max_size_bytes: 10 apples}", "invalid size '10 apples'"),
        ("cache: {eviction: {policy: {min_free_space_bytes: [1]}}}", "invalid size"),
        ("cache: {eviction: {policy: {min_free_space_bytes: -5GiB}}}", "invalid size"),
        ("cache: {eviction: {check_interval: soon}}", "invalid duration"),
        ("- a list", "must be a mapping"),
        ("server: [", "not valid YAML"),
        ("bogus: 1", "unsupported keys: bogus"),
    ],
)
def test_bad_config_files_are_rejected(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        settings_from_config(text)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("7d", 604800), ("1h 30m", 5400), ("250ms", 0.25), (90, 90), ("2h", 7200)],
)
def test_human_durations(text: str | int, seconds: float) -> None:
    assert parse_human_duration(text) == seconds


@pytest.mark.parametrize(
    ("text", "size"),
    [
        (0, 0),
        (123, 123),
        (1.0e10, 10**10),
        ("123", 123),
        ("123B", 123),
        ("50GiB", 50 * 1024**3),
        ("50 gib", 50 * 1024**3),
        ("50Gi", 50 * 1024**3),
        ("10GB", 10 * 1000**3),
        ("10G", 10 * 1000**3),
        ("1.5KiB", 1536),
        ("2TB", 2 * 1000**4),
        ("512MiB", 512 * 1024**2),
    ],
)
def test_human_sizes(text: str | int | float, size: int) -> None:
    assert parse_human_size(text) == size


@pytest.mark.parametrize("text", ["", "1.5", "GiB", "5XB", "-1", "1e3", "5 GiB extra", "nan"])
def test_bad_human_sizes(text: str) -> None:
    with pytest.raises(ConfigError, match="invalid size"):
        parse_human_size(text)


def test_registry_cli_reports_a_bad_config_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "mx.yaml"
    path.write_text("cache: {eviction: {policy: {type: lfu}}}\n")
    result = subprocess.run(
        [sys.executable, "-m", "flexinfer_registry", "--config", str(path), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "must be lru" in result.stderr


def test_file_roots_and_limits_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEXINFER_REGISTRY_FILE_ROOTS", f"{tmp_path}/a:{tmp_path}/b")
    monkeypatch.setenv("FLEXINFER_REGISTRY_LIMITS_WORKERS_PER_SOURCE", "16")
    monkeypatch.setenv("FLEXINFER_REGISTRY_LIMITS_MODEL_NAME_CHARS", "200")
    settings = RegistrySettings(cache_dir=tmp_path)
    assert settings.file_roots == [tmp_path / "a", tmp_path / "b"]
    limits = settings.limits.to_core()
    assert (limits.workers_per_source, limits.model_name_chars) == (16, 200)
    assert limits.tensors_per_worker == 200_000
    monkeypatch.setenv("FLEXINFER_REGISTRY_FILE_ROOTS", f'["{tmp_path}/c"]')
    assert RegistrySettings(cache_dir=tmp_path).file_roots == [tmp_path / "c"]
    monkeypatch.delenv("FLEXINFER_REGISTRY_FILE_ROOTS")
    assert RegistrySettings(cache_dir=tmp_path).file_roots == []  # file:// refused


@pytest.mark.parametrize(
    ("env", "value"),
    [
        ("FLEXINFER_REGISTRY_FILE_ROOTS", "relative/models"),
        ("FLEXINFER_REGISTRY_LIMITS_MODEL_NAME_CHARS", "5000"),
        ("FLEXINFER_REGISTRY_LIMITS_WORKERS_PER_SOURCE", "0"),
    ],
)
def test_bad_roots_and_limits_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: str, value: str
) -> None:
    monkeypatch.setenv(env, value)
    with pytest.raises(ValueError, match=r"absolute|less than or equal|greater than or equal"):
        RegistrySettings(cache_dir=tmp_path)
