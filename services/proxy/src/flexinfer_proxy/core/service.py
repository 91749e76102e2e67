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
from flexinfer_proxy.core.auth import Authenticator, TokenGrant, load_token_file
from flexinfer_proxy.core.backoff import Backoff
from flexinfer_proxy.core.catalog import ModelCatalog
from flexinfer_proxy.core.dispatch import Dispatcher, wait_budget
from flexinfer_proxy.core.endpoints import EndpointTable
from flexinfer_proxy.core.metrics import ProxyMetrics
from flexinfer_proxy.core.progress import ProgressBoard
from flexinfer_proxy.core.queue import ColdStartQueue
from flexinfer_proxy.core.ratelimit import RateLimiter
from flexinfer_proxy.core.routing.base import LoadTracker, StrategyDeps
from flexinfer_proxy.core.routing.registry import Router
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
        self.activity = ActivityTracker(self._publish_activity)
        self.metrics = ProxyMetrics.create(registry, self.activity.counts)
        self.table = EndpointTable(
            cooldown_s=settings.endpoint_cooldown_s, on_available=self._endpoints_available
        )
        self.catalog = ModelCatalog(
            store,
            settings.namespace,
            miss_interval_s=settings.miss_refresh_interval_s,
            on_change=self._models_changed,
            is_ready=self.table.usable,
        )
        self.auth = Authenticator(auth_grants(settings))
        self.limiter = RateLimiter(
            global_rps=settings.rate_limit_rps,
            global_burst=settings.rate_limit_burst,
            model_rps=settings.model_rate_limit_rps,
            model_burst=settings.model_rate_limit_burst,
        )
        self.loads = LoadTracker()
        self.router = Router(
            StrategyDeps(
                loads=self.loads,
                prefix_index_size=settings.prefix_index_size,
                explicit_key_max=settings.routing_explicit_key_max_length,
                system_segment_max=settings.routing_system_segment_max_length,
                document_segment_max=settings.routing_document_segment_max_length,
            )
        )
        self.progress = ProgressBoard()
        backoff = None
        if settings.backoff_enabled:
            backoff = Backoff(
                settings.backoff_initial_wait,
                settings.backoff_max_wait,
                settings.backoff_max_retries,
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
            backoff=backoff,
        )
        self.dispatcher = Dispatcher(self.table, self.queue)

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

    def _models_changed(self, models: dict[str, Model]) -> None:
        # External models (spec.endpoints) are routed to their URLs with no runtime.
        self.table.set_external(
            {key: list(m.spec.endpoints or []) for key, m in models.items() if m.spec.is_external}
        )
        keep = set(models)
        self.limiter.forget(keep)
        self.progress.forget(keep)

    def _endpoints_available(self, model: str) -> None:
        self.dispatcher.available(model)

    async def _publish_demand(self, event: DemandEvent) -> None:
        log.info("demand for %s (%d waiting)", event.model, event.queue_depth)
        await self.bus.publish(topics.DEMAND, event.model_dump(mode="json"))

    async def _publish_activity(self, event: ActivityEvent) -> None:
        await self.bus.publish(topics.ACTIVITY, event.model_dump(mode="json"))


def auth_grants(settings: ProxySettings) -> list[TokenGrant]:
    """Unscoped tokens from the settings plus the grants of the token file, if any."""
    grants = [TokenGrant(token=t, name=f"token-{i}") for i, t in enumerate(settings.auth_tokens)]
    if settings.auth_token_file is not None:
        grants += load_token_file(settings.auth_token_file)
    return grants
