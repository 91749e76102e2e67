"""The ModelExpress server's YAML config file, read as one more settings source.

ModelExpress loads its configuration as CLI > environment > config file > defaults, from a
file shaped like this (its own defaults shown)::

    server: {host: "0.0.0.0", port: 8001}
    cache:
      directory: "./cache"
      max_size_bytes: null
      eviction:
        enabled: true
        policy: {type: lru, unused_threshold: "7d", max_models: null,
                 min_free_space_bytes: null}
        check_interval: "1h"
    logging: {level: info, format: pretty}

The same file configures this registry: each key maps to a RegistrySettings field.
Keys this registry does not implement are rejected, not silently ignored. Sizes may be
given in bytes, as ModelExpress reads them, or as ``"50GiB"``/``"10GB"``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from flexinfer_common.errors import ConfigError

_HUMAN_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_HUMAN_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|d|h|m|s)")
_HUMAN_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*(?:([kmgtp])(i?)b?|b)?", re.IGNORECASE)
_SIZE_POWERS = {"k": 1, "m": 2, "g": 3, "t": 4, "p": 5}


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


def parse_human_size(value: object) -> int:
    """Bytes in a size: a whole number, or text like "50GiB", "50Gi" (powers of 1024) or
    "10GB", "10G" (powers of 1000, as Kubernetes quantities)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value < 0 or not float(value).is_integer():
            raise ConfigError(f"invalid size {value!r}: must be a whole number of bytes >= 0")
        return int(value)
    match = _HUMAN_SIZE.fullmatch(value.strip()) if isinstance(value, str) else None
    # A fraction of a byte makes no sense; "1.5GiB" does.
    if match is None or (match.group(2) is None and "." in match.group(1)):
        raise ConfigError(f"invalid size {value!r}: use bytes or forms like '50GiB' or '10GB'")
    number, prefix, binary = match.group(1), match.group(2), match.group(3)
    scale = (1024 if binary else 1000) ** _SIZE_POWERS[prefix.lower()] if prefix else 1
    return round(float(number) * scale)


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
    if (free := policy.pop("min_free_space_bytes", None)) is not None:
        out["eviction_min_free_space_bytes"] = parse_human_size(free)
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
    if (size := cache.pop("max_size_bytes", None)) is not None:
        out["cache_max_size_bytes"] = parse_human_size(size)
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
