"""Build the configured EventBus from settings: the URL scheme picks the implementation.

``create_bus`` only builds it; ``open_bus`` also waits, up to the configured connect
timeout, until the bus answers, so a service with a wrong bus URL fails at start with one
readable line instead of serving while every event it publishes is lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from urllib.parse import urlsplit

from flexinfer_common.bus.base import HEALTH_TIMEOUT_S, EventBus
from flexinfer_common.bus.settings import BusClientSettings
from flexinfer_common.errors import BusError, ConfigError
from flexinfer_common.settings import BusSettings

_RETRY_S = (0.1, 0.25, 0.5, 1.0)
"""Pauses between start-up attempts: quick at first (Redis is often only a moment late),
then once a second, so a long wait does not flood the log or the network."""


def _memory(settings: BusSettings, client: BusClientSettings) -> EventBus:
    from flexinfer_common.bus.memory import MemoryBus

    return MemoryBus(retention=settings.retention)


def _redis(settings: BusSettings, client: BusClientSettings) -> EventBus:
    from flexinfer_common.bus.redis import RedisBus

    return RedisBus.from_url(
        settings.url,
        prefix=settings.stream_prefix,
        retention=settings.retention,
        replay_window_s=client.replay_window_s,
    )


_FACTORIES: dict[str, Callable[[BusSettings, BusClientSettings], EventBus]] = {
    "memory": _memory,
    "redis": _redis,
    "rediss": _redis,
}


def create_bus(settings: BusSettings, client: BusClientSettings | None = None) -> EventBus:
    """The EventBus that ``settings.url`` names; ConfigError for an unusable URL."""
    try:
        scheme = urlsplit(settings.url).scheme
    except ValueError as exc:
        raise ConfigError(f"invalid bus URL: {exc}") from exc
    try:
        factory = _FACTORIES[scheme]
    except KeyError:
        known = ", ".join(sorted(_FACTORIES))
        raise ConfigError(f"bus url scheme {scheme!r} is not one of: {known}") from None
    return factory(settings, client or BusClientSettings())


async def open_bus(settings: BusSettings, client: BusClientSettings | None = None) -> EventBus:
    """The configured bus, once it answered; BusError if it did not within
    ``client.connect_timeout_s``, ConfigError at once if it refuses this client."""
    client = client or BusClientSettings()
    bus = create_bus(settings, client)
    try:
        await wait_until_answering(bus, client.connect_timeout_s)
    except BaseException:
        await bus.close()
        raise
    return bus


async def wait_until_answering(bus: EventBus, timeout_s: float) -> None:
    """Ping ``bus`` until it answers; BusError naming the last failure after ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    attempt = 0
    while True:
        remaining = deadline - loop.time()
        try:
            await bus.ping(max(min(remaining, HEALTH_TIMEOUT_S * 2), 0.01))
            return
        except BusError as exc:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise BusError(
                    f"{exc} (still failing after {timeout_s:g} s; "
                    "FLEXINFER_BUS_CONNECT_TIMEOUT_S sets how long to wait)"
                ) from exc
        await asyncio.sleep(min(_RETRY_S[min(attempt, len(_RETRY_S) - 1)], remaining))
        attempt += 1
