"""Upstream transports by name (``FLEXINFER_PROXY_UPSTREAM``)."""

from __future__ import annotations

from collections.abc import Callable

from flexinfer_common.errors import ConfigError
from flexinfer_proxy.transport.base import UpstreamTransport
from flexinfer_proxy.transport.h1 import H1Transport
from flexinfer_proxy.transport.httpx_transport import HttpxTransport
from flexinfer_proxy.transport.settings import TransportSettings

TransportFactory = Callable[[TransportSettings], UpstreamTransport]

TRANSPORTS: dict[str, TransportFactory] = {"h1": H1Transport, "httpx": HttpxTransport}


def create_transport(name: str, settings: TransportSettings) -> UpstreamTransport:
    """The transport called ``name``; ConfigError for an unknown one."""
    factory = TRANSPORTS.get(name)
    if factory is None:
        raise ConfigError(f"upstream transport {name!r} is not one of: {', '.join(TRANSPORTS)}")
    return factory(settings)
