"""Helpers every backend renders with: config values, image rules, probes, names.

spec.config is free-form and shared: keys a backend does not know are ignored (the
operator does the same; manifests carry keys for other consumers such as ``ggufFile``, and
keys of newer operator versions). A known key with a value of the wrong type is refused,
and so is any string that could smuggle something past the engine's argument parser: every
value becomes exactly one argv element, so NUL, CR and LF are refused everywhere, and a
flag's value must not start with ``-`` (it would be parsed as another flag).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from flexinfer_common.api import Model
from flexinfer_common.errors import InvalidSpecError
from flexinfer_controller.backends.base import Probe, RenderRequest, UnsupportedBackendError

_FORBIDDEN_CHARS = ("\x00", "\n", "\r")


def check_value(key: str, value: str, *, flag_value: bool = True) -> str:
    """``value`` if it is safe as one argv element (``flag_value``: follows a flag)."""
    if any(c in value for c in _FORBIDDEN_CHARS):
        raise InvalidSpecError(
            f"spec.config.{key} must not contain NUL or line breaks", field=f"spec.config.{key}"
        )
    if flag_value and value.startswith("-"):
        raise InvalidSpecError(
            f"spec.config.{key} must not start with '-' (it would be read as a flag)",
            field=f"spec.config.{key}",
        )
    return value


class Config:
    """Typed, checked access to spec.config; unknown keys are never read, so ignored."""

    def __init__(self, config: Mapping[str, Any] | None) -> None:
        self._config = dict(config or {})

    def has(self, key: str) -> bool:
        """Whether ``key`` is set (to anything but null)."""
        return self._config.get(key) is not None

    def _wrong(self, key: str, kind: str) -> InvalidSpecError:
        got = type(self._config[key]).__name__
        return InvalidSpecError(f"spec.config.{key} must be {kind}, not {got}", field=key)

    def string(self, key: str, default: str = "", *, flag_value: bool = True) -> str:
        """A string (numbers are accepted and written as given)."""
        raw = self._config.get(key)
        if raw is None:
            return default
        if isinstance(raw, bool) or not isinstance(raw, str | int | float):
            raise self._wrong(key, "a string")
        return check_value(key, str(raw), flag_value=flag_value)

    def env_text(self, key: str, default: str = "") -> str:
        """A value for an environment variable: strings, numbers and booleans (lower case)."""
        raw = self._config.get(key)
        if isinstance(raw, bool):
            return "true" if raw else "false"
        return self.string(key, default, flag_value=False)

    def json_text(self, key: str) -> str:
        """A JSON value for a flag: a string as written, or an object encoded compactly."""
        raw = self._config.get(key)
        if isinstance(raw, dict | list):
            return check_value(key, json.dumps(raw, separators=(",", ":"), sort_keys=True))
        return self.string(key)

    def integer(self, key: str, default: int = 0) -> int:
        """An integer (a whole float or a decimal string also counts)."""
        raw = self._config.get(key)
        if raw is None:
            return default
        if isinstance(raw, bool):
            raise self._wrong(key, "an integer")
        if isinstance(raw, int):
            return raw
        if isinstance(raw, float) and raw.is_integer():
            return int(raw)
        if isinstance(raw, str) and raw.strip().lstrip("-").isdigit():
            return int(raw)
        raise self._wrong(key, "an integer")

    def boolean(self, key: str, default: bool = False) -> bool:
        """A boolean (``"true"``/``"false"`` strings also count)."""
        raw = self._config.get(key)
        if raw is None:
            return default
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.lower() in ("true", "false", "1", "0"):
            return raw.lower() in ("true", "1")
        raise self._wrong(key, "a boolean")


@dataclass(frozen=True, slots=True)
class ImageRule:
    """One image rule: when it matches, a set env var wins over the default."""

    env_var: str
    default: str | None = None
    """None: only the env var (the rule falls through when it is unset)."""
    vendor: str | None = None
    arch_prefix: str | None = None
    extra_env: tuple[str, ...] = ()
    """More env vars read after ``env_var`` (Ollama's DEFAULT_BACKEND_IMAGE)."""


def resolve_image(
    rules: tuple[ImageRule, ...], request: RenderRequest, *, vendor: str | None = None
) -> str:
    """The first matching rule's image (arch rules, then vendor, then global, by order)."""
    vendor = vendor or request.vendor
    arch = request.arch or ""
    for rule in rules:
        if rule.vendor is not None and rule.vendor != vendor:
            continue
        if rule.arch_prefix is not None and not arch.startswith(rule.arch_prefix):
            continue
        for name in (rule.env_var, *rule.extra_env):
            if request.environ.get(name):
                return request.environ[name]
        if rule.default is not None:
            return rule.default
    raise AssertionError("every backend's image rules end with a global default")


def http_probe(path: str, port: int, initial: int, period: int, timeout: int) -> Probe:
    """The operator's HTTP readiness probe (failureThreshold 30)."""
    return Probe(port, path, initial, period, timeout, failure_threshold=30)


def tcp_probe(port: int, initial: int, period: int, timeout: int, failures: int = 90) -> Probe:
    """The operator's TCP readiness probe (failureThreshold 90 unless given)."""
    return Probe(port, None, initial, period, timeout, failure_threshold=failures)


def http_startup_probe(path: str, port: int, startup_timeout_s: float) -> Probe:
    """The operator's startup probe: every 2 s (5 s delay, 3 s timeout) for the whole
    startup timeout, at least 30 tries."""
    return Probe(port, path, 5, 2, 3, failure_threshold=max(30, int(startup_timeout_s) // 2))


def served_name(model: Model) -> str:
    """spec.litellm.servedModelName, or the Model's name."""
    litellm = model.spec.litellm
    return (litellm.served_model_name if litellm else None) or model.metadata.name


def model_ref(source: str) -> str:
    """The model's identifier from spec.source: ``HF://org/m`` -> ``org/m``,
    ``ollama://llama3:8b`` -> ``llama3:8b``, ``file:///d`` -> ``/d``."""
    parts = urlsplit(source)
    if parts.scheme.lower() == "file":
        return parts.path
    return f"{parts.netloc}{parts.path}".strip("/")


def model_arg(request: RenderRequest) -> str:
    """What ``--model`` gets: the location when there is one, else the identifier."""
    return request.model_location or model_ref(request.model.spec.source)


def require_vendor(name: str, vendors: frozenset[str], request: RenderRequest) -> None:
    """UnsupportedBackendError when the (known) vendor is not one the backend supports."""
    if request.vendor is not None and request.vendor not in vendors:
        supported = ", ".join(sorted(vendors))
        raise UnsupportedBackendError(
            f"backend {name!r} does not support GPU vendor {request.vendor!r} "
            f"(it supports: {supported})"
        )


def bind(request: RenderRequest, default_port: int) -> tuple[str, int]:
    """(host, port) the engine binds."""
    return request.host, request.port if request.port is not None else default_port


def rocm_env(arch: str | None) -> dict[str, str]:
    """ROCm settings per GPU architecture (RDNA3 gets its override, gfx906 no SDMA)."""
    arch = arch or ""
    if arch.startswith("gfx110"):
        return {
            "HSA_OVERRIDE_GFX_VERSION": "11.0.0",
            "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL": "1",
            "PYTORCH_ROCM_ARCH": "gfx1100",
        }
    if arch.startswith("gfx906"):
        return {"HSA_ENABLE_SDMA": "0", "PYTORCH_ROCM_ARCH": "gfx906"}
    return {"PYTORCH_ROCM_ARCH": arch} if arch else {}


FlagKind = str
"""``str``: ``--flag value`` when set; ``int``: ``--flag N`` when N > 0; ``bool``: ``--flag``
when true."""


def flag_args(config: Config, table: tuple[tuple[str, str, FlagKind], ...]) -> list[str]:
    """Arguments for the (config key, flag, kind) rows of ``table``, in its order."""
    args: list[str] = []
    for key, flag, kind in table:
        if kind == "bool":
            if config.boolean(key):
                args.append(flag)
        elif kind == "int":
            value = config.integer(key)
            if value > 0:
                args += [flag, str(value)]
        elif value_s := config.string(key):
            args += [flag, value_s]
    return args
