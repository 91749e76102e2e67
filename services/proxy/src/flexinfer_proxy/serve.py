"""Serve the proxy app with uvicorn's lifecycle and the proxy's own HTTP protocol."""

from __future__ import annotations

import asyncio
import logging
from contextlib import AbstractAsyncContextManager

from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol

from flexinfer_common.http1.server import HttpProtocol
from flexinfer_common.serving import (
    ServerGroup,
    bind_socket,
    freeze_startup_heap,
    serve_in_background,
)


async def serve_proxy(app: ASGIApp, host: str, port: int, server: str = "flexinfer") -> None:
    """Serve the proxy app on host:port until SIGINT/SIGTERM (``server``: see ProxySettings)."""
    group = ServerGroup()
    url = group.add_app("proxy", app, bind_socket(host, port), http=protocol_for(server))
    group.install_signal_handlers()

    async def ready() -> None:
        freeze_startup_heap()
        logging.getLogger("flexinfer_proxy").info("proxy serving on %s", url)

    await group.run(on_ready=ready)


PROTOCOLS: dict[str, type[asyncio.Protocol]] = {"flexinfer": HttpProtocol, "uvicorn": H11Protocol}
"""ProxySettings.server -> the HTTP protocol class: our own, or uvicorn's stock h11 one (which
bounds an incomplete head, as ours does; its httptools one does not)."""


def protocol_for(server: str) -> type[asyncio.Protocol]:
    """The HTTP protocol class for ProxySettings.server."""
    return PROTOCOLS[server]


def serve_proxy_in_background(
    app: ASGIApp, host: str = "127.0.0.1", *, server: str = "flexinfer", keepalive_s: float = 5.0
) -> AbstractAsyncContextManager[str]:
    """Serve ``app`` (lifespan included) on a free port with the ``server`` protocol; yields
    its URL."""
    return serve_in_background(app, host, http=protocol_for(server), keepalive_s=keepalive_s)
