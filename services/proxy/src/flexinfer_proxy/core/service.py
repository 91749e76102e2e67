"""ProxyCore: the catalog, endpoint table, queue, dispatcher and activity, wired together."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from opentelemetry.trace import Tracer
from prometheus_client import CollectorRegistry

from flexinfer_common.api import LoRAAdapter, LoRAAdapterPhase, Model
from flexinfer_common.api.status import blocked_reason
from flexinfer_common.bus import EventBus, topics
from flexinfer_common.bus.topics import ActivityEvent, DemandEvent
from flexinfer_common.store import ModelStore
from flexinfer_proxy.core.activity import ActivityTracker, activity_interval
from flexinfer_proxy.core.adapters import AdapterRouting
from flexinfer_proxy.core.auth import Authenticator, TokenGrant, load_token_file
from flexinfer_proxy.core.backoff import Backoff
from flexinfer_proxy.core.catalog import ModelCatalog, Target, adapter_queue
from flexinfer_proxy.core.cold_clock import READY, ColdStartClock
from flexinfer_proxy.core.dispatch import Dispatcher, wait_budget
from flexinfer_proxy.core.endpoints import EndpointTable
from flexinfer_proxy.core.errors import ModelUnavailableError
from flexinfer_proxy.core.metrics import ProxyMetrics
from flexinfer_proxy.core.progress import ProgressBoard
from flexinfer_proxy.core.queue import ColdStartQueue
from flexinfer_proxy.core.queue_mirror import QueueMirror, QueueSink
from flexinfer_proxy.core.ratelimit import RateLimiter
from flexinfer_proxy.core.routing.base import LoadTracker, RoutingStrategy, StrategyDeps
from flexinfer_proxy.core.routing.registry import Router
from flexinfer_proxy.settings import ProxySettings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class HotModel:
    """A Model's values the request path reads on every request."""

    model: Model
    activity_interval_s: float
    """Seconds between activity events for the model."""
    wait_budget_s: float
    """Seconds a request may wait for an endpoint."""
    strategy: RoutingStrategy
    """The routing strategy its annotation names."""


class ProxyCore:
    """Everything the request path needs besides HTTP; one per app."""

    def __init__(
        self,
        settings: ProxySettings,
        *,
        bus: EventBus,
        store: ModelStore,
        registry: CollectorRegistry,
        queue_sink: QueueSink | None = None,
        tracer: Tracer | None = None,
    ) -> None:
        """``queue_sink``: where queues are written besides the bus (None: nowhere);
        ``tracer``: traces requests (None: tracing is off)."""
        self.settings = settings
        self.tracer = tracer
        self._demand_traces: dict[str, str] = {}
        """Per model waiting for a cold start: the traceparent its demand carries."""
        self.mirror = (
            QueueMirror(queue_sink, settings.queue_signal_interval_s) if queue_sink else None
        )
        self.bus = bus
        self.store = store
        self.activity = ActivityTracker(self._publish_activity)
        self.metrics = ProxyMetrics.create(registry, self.activity.counts)
        self.table = EndpointTable(
            cooldown_s=settings.endpoint_cooldown_s,
            on_available=self._endpoints_available,
            on_blocked=self._model_blocked,
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
        self.cold_clock = ColdStartClock(
            self.metrics.cold_start_phase, self.metrics.cold_start_duration
        )
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
            refresh_endpoints=self._refresh_waiting,
            on_depth=self._on_depth,
            on_cold_start=self._cold_start,
            backoff=backoff,
        )
        self.adapters = AdapterRouting(self.table, self.queue, self.catalog)
        self.dispatcher = Dispatcher(self.table, self.queue, on_available=self.adapters.wake)
        self._hot: dict[str, HotModel] = {}
        self._demand_told: dict[str, int] = {}
        """The waiting count last logged per model (one entry per model that waited)."""

    def hot(self, target: Target) -> HotModel:
        """What the request path reads of ``target``'s Model, worked out once per Model.

        Kept per Model object (the catalog hands out the same one until the model changes):
        rebuilding these from the spec's pydantic defaults cost a few µs per request.
        """
        model = target.model
        cached = self._hot.get(target.key)
        if cached is None or cached.model is not model:
            settings = self.settings
            idle = model.spec.serverless_or_default.idle_timeout.total_seconds()
            cached = self._hot[target.key] = HotModel(
                model,
                activity_interval(settings.activity_interval_s, idle),
                wait_budget(model, settings.queue_timeout, settings.cold_start_timeout),
                self.router.for_model(model),
            )
        return cached

    def served_name(self, target: Target, url: str) -> str:
        """The ``model`` to send endpoint ``url``: what it serves, when it told us."""
        if target.renamed:
            return target.upstream_name
        return self.table.served_name(target.key, url) or target.upstream_name

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

    async def _refresh_waiting(self, key: str) -> None:
        """Re-read what a queue waits for: an adapter's status, or a model's endpoints."""
        if ":" in key:  # an adapter's queue (see catalog.adapter_queue)
            await self.catalog.refresh()
            # Endpoint events can be lost too: which endpoint holds it may have changed.
            await self.refresh_endpoints(key.partition(":")[0])
        else:
            await self.refresh_endpoints(key)

    async def aclose(self) -> None:
        """Stop demand loops and flush activity events."""
        await self.queue.aclose()
        await self.activity.aclose()
        if self.mirror is not None:
            await self.mirror.aclose()

    def _on_depth(self, model: str, depth: int) -> None:
        self.metrics.queue_depth.labels(model).set(depth)
        if self.mirror is not None:
            self.mirror.depth(model, depth)

    def _models_changed(self, models: dict[str, Model], read_started: float) -> None:
        # External models (spec.endpoints) are routed to their URLs with no runtime.
        self.table.set_external(
            {key: list(m.spec.endpoints or []) for key, m in models.items() if m.spec.is_external}
        )
        blocked = {key: blocked_reason(m.status) for key, m in models.items()}
        self.table.apply_states(blocked, read_started)
        keep = set(models)
        self.limiter.forget(keep)
        self.progress.forget(keep)
        self.cold_clock.forget(keep)
        self._adapters_changed(self.catalog.adapters)

    def _adapters_changed(self, adapters: list[LoRAAdapter]) -> None:
        """Requests waiting for an adapter go once an endpoint holds it, or fail if it
        cannot be loaded."""
        for adapter in adapters:
            if adapter.status.phase is not LoRAAdapterPhase.FAILED:
                self.adapters.wake_one(adapter)
            else:
                why = adapter.status.message or "the controller could not load it"
                error = ModelUnavailableError(
                    adapter.spec.adapter_name, why, delay=self.settings.retry_after_s
                )
                self.queue.fail(adapter_queue(adapter), error)

    def demand_trace(self, model: str, traceparent: str) -> None:
        """A traced request waits for ``model``: the cold start's demand names its trace
        (the first such request's, until the model has an endpoint)."""
        self._demand_traces.setdefault(model, traceparent)

    def _endpoints_available(self, model: str) -> None:
        self.cold_clock.phase(model, READY)
        self._demand_traces.pop(model, None)
        self.dispatcher.available(model)

    def _model_blocked(self, model: str, reason: str) -> None:
        # Waiting cannot help: every queued request for the model is answered now.
        label = model.partition("/")[2]
        error = ModelUnavailableError(label, reason, delay=self.settings.retry_after_s)
        failed = self.queue.fail(model, error)
        if failed:
            log.warning(
                "model %s cannot start (%s): answered %d waiting requests", model, reason, failed
            )

    def _cold_start(self, model: str) -> None:
        self.progress.restart(model)
        self.cold_clock.begin(model)
        self.metrics.cold_starts.labels(model).inc()
        self._demand_told.pop(model, None)

    async def _publish_demand(self, event: DemandEvent) -> None:
        # Re-sent every couple of seconds while requests wait: told when the count changes;
        # why the model is not serving yet is the controller's to log (its phase changes).
        told = self._demand_told.get(event.model)
        level = logging.DEBUG if told == event.queue_depth else logging.INFO
        self._demand_told[event.model] = event.queue_depth
        traced = self._demand_traces.get(event.model)
        if traced is not None and event.traceparent is None:
            event = event.model_copy(update={"traceparent": traced})
        log.log(level, "demand for %s (%d waiting)", event.model, event.queue_depth)
        # No ``adapter: null``: a controller that predates the field reads the event.
        await self.bus.publish(topics.DEMAND, event.model_dump(mode="json", exclude_none=True))

    async def _publish_activity(self, event: ActivityEvent) -> None:
        await self.bus.publish(topics.ACTIVITY, event.model_dump(mode="json"))


def auth_grants(settings: ProxySettings) -> list[TokenGrant]:
    """Unscoped tokens from the settings plus the grants of the token file, if any."""
    grants = [TokenGrant(token=t, name=f"token-{i}") for i, t in enumerate(settings.auth_tokens)]
    if settings.auth_token_file is not None:
        grants += load_token_file(settings.auth_token_file)
    return grants
