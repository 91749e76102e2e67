"""The ModelExpress server's YAML config file, read as one more settings source.

ModelExpress loads its configuration as CLI > environment > config file > defaults, from a
file shaped like this (its own defaults shown)::

    server: {host: "0.0.0.0", port: 8001}
    cache:
      directory: "./cache"
      eviction:
        enabled: true
        policy: {type: lru, unused_threshold: "7d", max_models: null}
        check_interval: "1h"
    logging: {level: info, format: pretty}

The same file configures this registry: each key maps to a RegistrySettings field.
Keys this registry does not implement are rejected, not silently ignored.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from flexinfer_common.errors import ConfigError

_HUMAN_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_HUMAN_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|d|h|m|s)")


def parse_human_duration(value: object) -> float:
    """Seconds in a humantime-style duration ("7d", "1h 30m", "250ms") or a number."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip()
    total, pos = 0.0, 0
    for match in _HUMAN_PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _HUMAN_UNITS[match.group(2)]
        pos = match.end()
    if not text or pos != len(text):
        raise ConfigError(f"invalid duration {value!r}: use forms like '7d', '1h' or '30m'")
    return total


def _section(data: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = data.pop(key, None) or {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}{key} must be a mapping")
    return value


def _reject_rest(data: dict[str, Any], where: str) -> None:
    if data:
        keys = ", ".join(f"{where}{key}" for key in sorted(data))
        raise ConfigError(f"config file: unsupported keys: {keys}")


def _eviction(eviction: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "enabled" in eviction:
        out["eviction_enabled"] = bool(eviction.pop("enabled"))
    if "check_interval" in eviction:
        out["eviction_interval_s"] = parse_human_duration(eviction.pop("check_interval"))
    policy = _section(eviction, "policy", "cache.eviction.")
    if policy.pop("type", "lru") != "lru":
        raise ConfigError("config file: cache.eviction.policy.type must be lru")
    if "unused_threshold" in policy:
        out["eviction_unused_threshold_s"] = parse_human_duration(policy.pop("unused_threshold"))
    if "max_models" in policy:
        out["eviction_max_models"] = policy.pop("max_models")
    if policy.pop("min_free_space_bytes", None) is not None:
        raise ConfigError("config file: min_free_space_bytes is not supported yet")
    _reject_rest(policy, "cache.eviction.policy.")
    _reject_rest(eviction, "cache.eviction.")
    return out


def settings_from_config(text: str) -> dict[str, Any]:
    """RegistrySettings field values from the text of a ModelExpress config file."""
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError("config file must be a mapping")
    out: dict[str, Any] = {}
    server = _section(data, "server", "")
    for key, field in (("host", "grpc_host"), ("port", "grpc_port")):
        if key in server:
            out[field] = server.pop(key)
    _reject_rest(server, "server.")
    cache = _section(data, "cache", "")
    if "directory" in cache:
        out["cache_dir"] = Path(str(cache.pop("directory")))
    if cache.pop("max_size_bytes", None) is not None:
        raise ConfigError("config file: cache.max_size_bytes is not supported yet")
    out.update(_eviction(_section(cache, "eviction", "cache.")))
    _reject_rest(cache, "cache.")
    logging = _section(data, "logging", "")
    log: dict[str, Any] = {}
    if "level" in logging:
        log["level"] = str(logging.pop("level")).upper()
    if "format" in logging:
        log["json_format"] = logging.pop("format") == "json"
    for key in ("file", "structured"):
        logging.pop(key, None)
    _reject_rest(logging, "logging.")
    if log:
        out["log"] = log
    _reject_rest(data, "")
    return out


def read_config_file(path: Path) -> dict[str, Any]:
    """``settings_from_config`` of the file at ``path``."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    return settings_from_config(text)
