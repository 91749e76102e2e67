"""A whole proxy on a real socket, served by the HTTP protocol its ``server`` setting names.

``flexinfer_proxy.testing_stack.proxy_stack`` always serves with the proxy's own protocol;
black-box tests run every case on both protocols, so they build the app the same way and
serve it with ``protocol_for(settings.server)``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

from flexinfer_common.api import Model
from flexinfer_common.bus.memory import MemoryBus
from flexinfer_common.serving import serve_in_background
from flexinfer_common.settings import StoreSettings
from flexinfer_common.store import create_store
from flexinfer_proxy.app import create_app
from flexinfer_proxy.serve import protocol_for
from flexinfer_proxy.settings import ProxySettings
from flexinfer_proxy.testing_stack import ProxyStack

Server = Literal["flexinfer", "uvicorn"]
SERVERS: tuple[Server, ...] = ("flexinfer", "uvicorn")
"""The values of ProxySettings.server: every black-box case runs on each."""


@asynccontextmanager
async def served_proxy(
    tmp_path: Path,
    models: list[Model],
    server: Server,
    *,
    keepalive_s: float = 5.0,
    **overrides: Any,
) -> AsyncIterator[ProxyStack]:
    """A proxy serving ``models`` (SQLite store under ``tmp_path``) with protocol ``server``."""
    bus = MemoryBus()
    store = create_store(StoreSettings(url=f"sqlite:///{tmp_path}/store.db"))
    try:
        for model in models:
            await store.create_model(model)
        overrides.setdefault("instance_id", "test")
        settings = ProxySettings(port=0, server=server, **overrides)
        app = create_app(settings, bus=bus, store=store)
        http = protocol_for(settings.server)
        async with serve_in_background(app, http=http, keepalive_s=keepalive_s) as url:
            yield ProxyStack(bus=bus, store=store, url=url, core=app.state.core)
    finally:
        await bus.close()
        await store.close()
