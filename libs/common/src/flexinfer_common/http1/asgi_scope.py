"""The ASGI side of the proxy's server: what an app is told about a request it serves.

Proxied requests never become ASGI scopes (the pipeline reads the exchange itself); the
other routes (health, metrics, /v1/models, admin) are served by the FastAPI app, which
needs the scope uvicorn would have built.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from dataclasses import dataclass
from typing import Any

from flexinfer_common.http1.exchange import Exchange
from flexinfer_common.http1.request_head import split_target

_ASGI = {"version": "3.0", "spec_version": "2.3"}


@dataclass(slots=True)
class ConnectionScope:
    """The per-connection part of every scope: addresses, scheme, root path, app state."""

    root_path: str
    app_state: dict[str, Any]
    server: tuple[str, int] | None = None
    client: tuple[str, int] | None = None
    scheme: str = "http"

    def connected(self, transport: asyncio.BaseTransport) -> None:
        """Take the addresses and scheme of a new connection."""
        self.server = _addr(transport.get_extra_info("sockname"))
        self.client = _addr(transport.get_extra_info("peername"))
        if transport.get_extra_info("sslcontext"):
            self.scheme = "https"

    def scope(self, exchange: Exchange, http_version: str) -> dict[str, Any]:
        """The HTTP scope of one request; RejectedError for a target that does not parse."""
        path, raw_path, query = split_target(exchange.target)
        if "%" in path:
            path = urllib.parse.unquote(path)
        return {
            "type": "http",
            "asgi": _ASGI,
            "http_version": http_version,
            "server": self.server,
            "client": self.client,
            "scheme": self.scheme,
            "method": exchange.method,
            "root_path": self.root_path,
            "path": self.root_path + path,
            "raw_path": self.root_path.encode("ascii") + raw_path,
            "query_string": query,
            "headers": exchange.headers,
            "state": self.app_state.copy(),
            "extensions": {},
        }


def _addr(value: Any) -> tuple[str, int] | None:
    if isinstance(value, tuple) and len(value) >= 2:
        return (str(value[0]), int(value[1]))
    return None
