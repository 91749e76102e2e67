"""Background loops that keep the proxy's view current: bus consumers and store resync."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import httpx
import pydantic

from flexinfer_common.bus import BatchHandler, Consumer, Message, consume, topics
from flexinfer_common.bus.topics import (
    AdapterChangedEvent,
    EndpointsEvent,
    ModelChangedEvent,
    ProgressEvent,
)
from flexinfer_common.errors import FlexInferError
from flexinfer_proxy.core.service import ProxyCore

log = logging.getLogger(__name__)

_BUS_RETRY_S = 1.0


class ProxySync:
    """Endpoint and model events from the bus, plus a periodic full re-read of the store."""

    def __init__(self, core: ProxyCore) -> None:
        self.core = core
        self._tasks: list[asyncio.Task[None]] = []
        self._health: httpx.AsyncClient | None = None

    async def start(self) -> None:
        """Join the broadcast groups, load the store, then start the loops."""
        core = self.core
        group = f"proxy-{core.settings.instance_id}"
        name = core.settings.instance_id
        # Join the groups before reading the store, so no event falls between the two.
        endpoints = core.bus.consumer(topics.ENDPOINTS, group, name)
        models = core.bus.consumer(topics.MODELS, group, name)
        progress = core.bus.consumer(topics.PROGRESS, group, name)
        adapters = core.bus.consumer(topics.ADAPTERS, group, name)
        try:
            await core.resync()
        except FlexInferError as exc:
            log.warning("initial store read failed (retrying in the background): %s", exc)
        # One round of external endpoint checks before serving: what each one serves is
        # known before the first request is sent to it (bounded by the connect timeout).
        self._health = httpx.AsyncClient(
            timeout=httpx.Timeout(core.settings.connect_timeout_s), trust_env=False
        )
        await self.check_external(self._health)
        period = min(1.0, core.settings.activity_interval_s)
        self._tasks = [
            self._consumer_task(endpoints, topics.ENDPOINTS, self._on_endpoints),
            self._consumer_task(models, topics.MODELS, self._on_models),
            self._consumer_task(adapters, topics.ADAPTERS, self._on_adapters),
            asyncio.create_task(self._resync_loop(), name="proxy-resync"),
            asyncio.create_task(core.activity.run(period), name="proxy-activity"),
            self._consumer_task(progress, topics.PROGRESS, self._on_progress),
            asyncio.create_task(self._cleanup_loop(), name="proxy-queue-cleanup"),
            asyncio.create_task(self._health_loop(), name="proxy-health"),
        ]

    async def stop(self) -> None:
        """Cancel the loops and wait for them."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        if self._health is not None:
            await self._health.aclose()
            self._health = None

    def _consumer_task(
        self, consumer: Consumer, topic: str, handle: BatchHandler
    ) -> asyncio.Task[None]:
        loop = consume(self.core.bus, consumer, handle, topic=topic, retry_s=_BUS_RETRY_S)
        return asyncio.create_task(loop, name=f"proxy-consume-{topic}")

    async def _on_endpoints(self, messages: list[Message]) -> None:
        for message in messages:
            try:
                event = EndpointsEvent.model_validate(message.payload)
            except pydantic.ValidationError as exc:
                log.warning("ignoring malformed endpoints event %s: %s", message.id, exc)
                continue
            if not self.core.table.apply_event(event):
                log.debug("dropped stale endpoints event for %s", event.model)

    async def _on_models(self, messages: list[Message]) -> None:
        deleted: list[str] = []
        for message in messages:
            try:
                event = ModelChangedEvent.model_validate(message.payload)
            except pydantic.ValidationError as exc:
                log.warning("ignoring malformed model event %s: %s", message.id, exc)
                continue
            if event.deleted:
                deleted.append(event.model)
        # One re-read covers a whole batch of changes.
        await self.core.catalog.refresh()
        if deleted:
            known = {m.key for m in self.core.catalog.models}
            self.core.table.forget_only([m for m in deleted if m not in known])

    async def _on_adapters(self, messages: list[Message]) -> None:
        valid = 0
        for message in messages:
            try:
                AdapterChangedEvent.model_validate(message.payload)
            except pydantic.ValidationError as exc:
                log.warning("ignoring malformed adapter event %s: %s", message.id, exc)
                continue
            valid += 1
        if valid:
            # One re-read of models and adapters covers a whole batch of changes.
            await self.core.catalog.refresh()

    async def _on_progress(self, messages: list[Message]) -> None:
        for message in messages:
            try:
                event = ProgressEvent.model_validate(message.payload)
            except pydantic.ValidationError as exc:
                log.warning("ignoring malformed progress event %s: %s", message.id, exc)
                continue
            self.core.progress.update(event)
            self.core.cold_clock.phase(event.model, event.phase)

    async def _cleanup_loop(self) -> None:
        settings = self.core.settings
        while True:
            await asyncio.sleep(settings.queue_cleanup_interval_s)
            removed = self.core.queue.cleanup_stale(2 * settings.queue_timeout)
            if removed:
                log.debug("removed stale queues: %s", removed)

    async def _health_loop(self) -> None:
        """Actively check external endpoints; unhealthy ones are skipped until they recover."""
        assert self._health is not None, "start() made the client"
        while True:
            await asyncio.sleep(self.core.settings.health_interval_s)
            await self.check_external(self._health)

    async def check_external(self, client: httpx.AsyncClient) -> None:
        """One round of health checks over every external endpoint."""
        checks = [
            (model, url) for model, urls in self.core.table.external().items() for url in urls
        ]
        results = await asyncio.gather(*(_probe(client, url) for _, url in checks))
        for (model, url), (healthy, served) in zip(checks, results, strict=True):
            if not healthy:
                log.warning("external endpoint %s of %s is unhealthy", url, model)
            else:
                self.core.table.set_served_name(model, url, served)
            self.core.table.set_health(model, url, healthy)

    async def _resync_loop(self) -> None:
        while True:
            await asyncio.sleep(self.core.settings.resync_interval_s)
            try:
                await self.core.resync()
            except FlexInferError as exc:
                log.warning("store resync failed: %s", exc)


async def _probe(client: httpx.AsyncClient, base_url: str) -> tuple[bool, str | None]:
    """Whether GET <base>/v1/models answers below 500 (401 counts: the server is up), and
    the model it serves when it lists exactly one (what requests are then sent as)."""
    try:
        response = await client.get(base_url.rstrip("/") + "/v1/models")
    except httpx.HTTPError:
        return False, None
    return response.status_code < 500, _only_model(response)


def _only_model(response: httpx.Response) -> str | None:
    if response.status_code != 200:
        return None
    try:
        data = response.json().get("data")
    except (ValueError, AttributeError):
        return None
    if isinstance(data, list) and len(data) == 1 and isinstance(data[0], dict):
        name = data[0].get("id")
        if isinstance(name, str) and 0 < len(name) <= 256 and name.isprintable():
            return name
    return None
