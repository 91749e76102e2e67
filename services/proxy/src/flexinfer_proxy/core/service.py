"""ProxyCore: the catalog, endpoint table, queue, dispatcher and activity, wired together."""

from __future__ import annotations

import logging
import time

from prometheus_client import CollectorRegistry

from flexinfer_common.api import Model
from flexinfer_common.bus import EventBus, topics
from flexinfer_common.bus.topics import ActivityEvent, DemandEvent
from flexinfer_common.store import ModelStore
from flexinfer_proxy.core.activity import ActivityTracker, activity_interval
from flexinfer_proxy.core.catalog import ModelCatalog
from flexinfer_proxy.core.dispatch import Dispatcher, wait_budget
from flexinfer_proxy.core.endpoints import EndpointTable
from flexinfer_proxy.core.metrics import ProxyMetrics
from flexinfer_proxy.core.queue import ColdStartQueue
from flexinfer_proxy.settings import ProxySettings

log = logging.getLogger(__name__)


class ProxyCore:
    """Everything the request path needs besides HTTP; one per app."""

    def __init__(
        self,
        settings: ProxySettings,
        *,
        bus: EventBus,
        store: ModelStore,
        registry: CollectorRegistry,
    ) -> None:
        self.settings = settings
        self.bus = bus
        self.store = store
        self.metrics = ProxyMetrics.create(registry)
        self.catalog = ModelCatalog(
            store,
            settings.namespace,
            miss_interval_s=settings.miss_refresh_interval_s,
        )
        self.table = EndpointTable(
            cooldown_s=settings.endpoint_cooldown_s, on_available=self._endpoints_available
        )
        self.queue = ColdStartQueue(
            proxy_id=settings.instance_id,
            max_size=settings.max_queue_size,
            resend_interval_s=settings.demand_resend_interval_s,
            retry_after_s=settings.retry_after_s,
            publish_demand=self._publish_demand,
            refresh_endpoints=self.refresh_endpoints,
            on_depth=lambda m, n: self.metrics.queue_depth.labels(m).set(n),
            on_cold_start=lambda m: self.metrics.cold_starts.labels(m).inc(),
        )
        self.dispatcher = Dispatcher(self.table, self.queue)
        self.activity = ActivityTracker(
            self._publish_activity,
            on_active=lambda m, n: self.metrics.active_connections.labels(m).set(n),
        )

    def wait_budget(self, model: Model) -> float:
        """Seconds a request for ``model`` may wait for an endpoint."""
        return wait_budget(model, self.settings.queue_timeout, self.settings.cold_start_timeout)

    def activity_interval(self, model: Model) -> float:
        """Seconds between activity events for ``model``."""
        idle = model.spec.serverless_or_default.idle_timeout.total_seconds()
        return activity_interval(self.settings.activity_interval_s, idle)

    async def resync(self) -> None:
        """Re-read every Model and endpoint from the store."""
        await self.catalog.refresh()
        started = time.monotonic()
        records = await self.store.list_endpoints()
        self.table.apply_records(records, started, [m.key for m in self.catalog.models])

    async def refresh_endpoints(self, model: str) -> None:
        """Re-read one model's endpoints from the store."""
        started = time.monotonic()
        records = await self.store.list_endpoints(model)
        self.table.apply_records(records, started, [model])

    async def aclose(self) -> None:
        """Stop demand loops and flush activity events."""
        await self.queue.aclose()
        await self.activity.aclose()

    def _endpoints_available(self, model: str) -> None:
        self.dispatcher.available(model)

    async def _publish_demand(self, event: DemandEvent) -> None:
        log.info("demand for %s (%d waiting)", event.model, event.queue_depth)
        await self.bus.publish(topics.DEMAND, event.model_dump(mode="json"))

    async def _publish_activity(self, event: ActivityEvent) -> None:
        await self.bus.publish(topics.ACTIVITY, event.model_dump(mode="json"))
