"""Serve the proxy app with uvicorn's lifecycle and the proxy's own HTTP protocol."""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.types import ASGIApp

from flexinfer_common.serving import ServerGroup, bind_socket
from flexinfer_proxy.server import HttpProtocol


class ProxyServerGroup(ServerGroup):
    """A ServerGroup whose servers speak HTTP through ``HttpProtocol`` (one port, all routes)."""

    def add_app(self, name: str, app: ASGIApp, sock: socket.socket) -> str:
        """Serve ``app`` on ``sock`` with the proxy's protocol; returns its URL."""
        url = super().add_app(name, app, sock)
        # uvicorn resolves its protocol class when the server starts; a class is taken as is.
        self._servers[-1][1].config.http = HttpProtocol
        return url


async def serve_proxy(app: ASGIApp, host: str, port: int, server: str = "flexinfer") -> None:
    """Serve the proxy app on host:port until SIGINT/SIGTERM (``server``: see ProxySettings)."""
    group = ProxyServerGroup() if server == "flexinfer" else ServerGroup()
    url = group.add_app("proxy", app, bind_socket(host, port))
    group.install_signal_handlers()

    async def ready() -> None:
        # Everything built at startup (modules, the app, pydantic and prometheus objects)
        # lives for the whole process: a full collection walking it took tens of ms, which
        # showed as p99 latency under load. Frozen, collections only walk new objects.
        gc.collect()
        gc.freeze()
        logging.getLogger("flexinfer_proxy").info("proxy serving on %s", url)

    await group.run(on_ready=ready)


@asynccontextmanager
async def serve_proxy_in_background(
    app: ASGIApp, host: str = "127.0.0.1", *, keepalive_s: float = 5.0
) -> AsyncIterator[str]:
    """Serve ``app`` (lifespan included) with ``HttpProtocol`` on a free port; yields its URL."""
    group = ProxyServerGroup(log_level="error", ready_file=None)
    url = group.add_app("app", app, bind_socket(host, 0))
    group._servers[-1][1].config.timeout_keep_alive = keepalive_s  # type: ignore[assignment]
    started = asyncio.Event()

    async def on_ready() -> None:
        started.set()

    task = asyncio.create_task(group.run(on_ready=on_ready))
    waiter = asyncio.create_task(started.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    if not started.is_set():
        waiter.cancel()
        await task  # raises the startup error
    try:
        yield url
    finally:
        group.stop()
        await task
