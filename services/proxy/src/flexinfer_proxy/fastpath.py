"""The proxy's ASGI entry: proxied POSTs go straight to the handler, the rest to FastAPI.

FastAPI's middleware stack (error, exception and exit-stack middleware) and its router cost
about a fifth of the proxy's CPU per request; the proxied routes need none of it, since
the handler answers its own errors in OpenAI's shape. Health, metrics and /v1/models
keep FastAPI.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send


class ProxyApp(FastAPI):
    """FastAPI, except for ``POST /v1/...`` and ``POST /model/...``: those go to ``proxy``."""

    proxy: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Dispatch one ASGI connection."""
        proxy = self.proxy
        if proxy is not None and scope["type"] == "http" and scope["method"] == "POST":
            path: str = scope["path"]
            if path.startswith(("/v1/", "/model/")):
                await proxy(scope, receive, send)
                return
        await super().__call__(scope, receive, send)
