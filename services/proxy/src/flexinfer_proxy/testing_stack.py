"""Test helpers: a whole proxy (memory bus, SQLite store) on a real socket, and upstreams."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
from opentelemetry.sdk.trace.export import SpanExporter

from flexinfer_common.api import Model
from flexinfer_common.api.meta import utcnow
from flexinfer_common.bus import topics
from flexinfer_common.bus.memory import MemoryBus
from flexinfer_common.bus.topics import EndpointInfo, EndpointsEvent
from flexinfer_common.serving import serve_in_background
from flexinfer_common.settings import StoreSettings
from flexinfer_common.store import EndpointRecord, ModelStore, create_store
from flexinfer_proxy.app import create_app
from flexinfer_proxy.core.service import ProxyCore
from flexinfer_proxy.serve import serve_proxy_in_background
from flexinfer_proxy.settings import ProxySettings
from flexinfer_proxy.testing import FakeUpstream


async def wait_until(condition: Callable[[], object], timeout_s: float = 5.0) -> None:
    """Poll ``condition()`` every 10 ms until truthy; AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


async def announce_endpoints(
    store: ModelStore, bus: MemoryBus, model: str, infos: list[EndpointInfo], revision: int
) -> None:
    """Announce ``model``'s whole endpoint set as the controller does: its records in the
    store first (what the proxy's periodic resync reads), then the event on the bus."""
    for record in await store.list_endpoints(model):
        await store.delete_endpoint(model, record.replica)
    for info in infos:
        record = EndpointRecord(
            model=model,
            replica=info.replica,
            url=info.url,
            ready=True,
            node=None,
            updated_at=utcnow(),
        )
        await store.put_endpoint(record)
    event = EndpointsEvent(model=model, endpoints=infos, phase="Ready", revision=revision)
    await bus.publish(topics.ENDPOINTS, event.model_dump(mode="json", exclude_none=True))


@dataclass
class ProxyStack:
    """A running proxy with its bus and store."""

    bus: MemoryBus
    store: ModelStore
    url: str
    core: ProxyCore
    revision: int = 0

    async def set_endpoints(
        self,
        model: str,
        urls: list[str],
        *,
        terminating: frozenset[str] = frozenset(),
        adapters: Mapping[str, list[str]] | None = None,
    ) -> None:
        """Write and publish the model's endpoint set, as the controller does, and wait
        until the proxy applied it (its periodic store resync then agrees with it).
        ``adapters``: url -> the LoRA adapters its engine holds (None: not said)."""
        self.revision += 1
        held = adapters or {}
        infos = [
            EndpointInfo(url=u, replica=f"r{i}", terminating=u in terminating, adapters=held.get(u))
            for i, u in enumerate(urls)
        ]
        await announce_endpoints(self.store, self.bus, model, infos, self.revision)
        await wait_until(lambda: self.core.table.revision(model) == self.revision)

    def openai(self, api_key: str = "test", **kwargs: Any) -> openai.AsyncOpenAI:
        """An official OpenAI client pointed at the proxy."""
        return openai.AsyncOpenAI(
            base_url=f"{self.url}/v1", api_key=api_key, max_retries=0, **kwargs
        )


@asynccontextmanager
async def proxy_stack(
    tmp_path: Path,
    models: list[Model],
    *,
    span_exporter: SpanExporter | None = None,
    **overrides: Any,
) -> AsyncIterator[ProxyStack]:
    """A proxy serving ``models`` from a SQLite store under ``tmp_path``; with
    ``span_exporter`` it traces requests into it."""
    bus = MemoryBus()
    store = create_store(StoreSettings(url=f"sqlite:///{tmp_path}/store.db"))
    for model in models:
        await store.create_model(model)
    overrides.setdefault("instance_id", "test")
    settings = ProxySettings(port=0, **overrides)
    app = create_app(settings, bus=bus, store=store, span_exporter=span_exporter)
    try:
        # The server protocol the settings name: the proxy's own, as in production, or
        # uvicorn's stock one.
        async with serve_proxy_in_background(app, server=settings.server) as url:
            yield ProxyStack(bus=bus, store=store, url=url, core=app.state.core)
    finally:
        await bus.close()
        await store.close()


@asynccontextmanager
async def upstreams(count: int, **kwargs: Any) -> AsyncIterator[list[tuple[FakeUpstream, str]]]:
    """``count`` fake OpenAI servers named u0, u1, ... on free ports."""
    async with AsyncExitStack() as stack:
        out = []
        for index in range(count):
            fake = FakeUpstream(name=f"u{index}", **kwargs)
            url = await stack.enter_async_context(serve_in_background(fake))
            out.append((fake, url))
        yield out
