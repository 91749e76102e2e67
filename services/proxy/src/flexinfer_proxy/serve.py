"""Serve the proxy app with uvicorn's lifecycle and the proxy's own HTTP protocol."""

from __future__ import annotations

import logging
import socket

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


async def serve_proxy(app: ASGIApp, host: str, port: int) -> None:
    """Serve the proxy app on host:port until SIGINT/SIGTERM."""
    group = ProxyServerGroup()
    url = group.add_app("proxy", app, bind_socket(host, port))
    group.install_signal_handlers()

    async def ready() -> None:
        logging.getLogger("flexinfer_proxy").info("proxy serving on %s", url)

    await group.run(on_ready=ready)
