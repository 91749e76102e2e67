"""Build the configured EventBus from settings: the URL scheme picks the implementation."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

from flexinfer_common.bus.base import EventBus
from flexinfer_common.errors import ConfigError
from flexinfer_common.settings import BusSettings


def _memory(settings: BusSettings) -> EventBus:
    from flexinfer_common.bus.memory import MemoryBus

    return MemoryBus(retention=settings.retention)


def _redis(settings: BusSettings) -> EventBus:
    from flexinfer_common.bus.redis import RedisBus

    return RedisBus.from_url(
        settings.url, prefix=settings.stream_prefix, retention=settings.retention
    )


_FACTORIES: dict[str, Callable[[BusSettings], EventBus]] = {
    "memory": _memory,
    "redis": _redis,
    "rediss": _redis,
}


def create_bus(settings: BusSettings) -> EventBus:
    """The EventBus that ``settings.url`` names."""
    scheme = urlsplit(settings.url).scheme
    try:
        factory = _FACTORIES[scheme]
    except KeyError:
        known = ", ".join(sorted(_FACTORIES))
        raise ConfigError(f"bus url scheme {scheme!r} is not one of: {known}") from None
    return factory(settings)
