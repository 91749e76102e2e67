"""The controller's moving parts: work queue, workers, event consumers and periodic resync."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from pydantic import BaseModel, ValidationError

from flexinfer_common.api.meta import utcnow
from flexinfer_common.bus import EventBus, Message, consume, topics
from flexinfer_common.errors import FlexInferError
from flexinfer_common.store import ModelStore
from flexinfer_controller.backends import BackendRegistry, LaunchContext
from flexinfer_controller.core.activation_trace import ActivationTraces
from flexinfer_controller.core.cache import ModelCache, NoRegistryCache, Notify
from flexinfer_controller.core.consumers import EventLoop
from flexinfer_controller.core.crashes import CrashTracker
from flexinfer_controller.core.endpoints import EndpointPublisher
from flexinfer_controller.core.events import ModelEvents
from flexinfer_controller.core.gpu import DeclaredInventory, GPUInventory, Placer
from flexinfer_controller.core.kvcache import KVCacheCheck
from flexinfer_controller.core.metrics import ControllerMetrics
from flexinfer_controller.core.nodes import FleetInventory, ReportedNodes
from flexinfer_controller.core.prestart import PreStart
from flexinfer_controller.core.progress import ProgressReporter
from flexinfer_controller.core.queue import WorkQueue
from flexinfer_controller.core.reconciler import Reconciler
from flexinfer_controller.core.scaleout import ScaleOut
from flexinfer_controller.core.sharing import EngineChange, EngineKind, NoSharing, SharedGPUHook
from flexinfer_controller.core.sharing.drain import Drainer
from flexinfer_controller.core.sleepbook import SleepPolicy
from flexinfer_controller.core.sources import SourceResolution, resolve_source
from flexinfer_controller.core.workers import Backoff, run_worker
from flexinfer_controller.runtime import ReplicaEvent, ReplicaListener, ReplicaState, Runtime

log = logging.getLogger(__name__)


class ModelWatcher(Protocol):
    """Another loop that follows Models: the adapter loop loads adapters into their engines."""

    def model_changed(self, model: str) -> None:
        """Model ``model`` was written (through the admin API or the apiserver)."""

    def replica_changed(self, event: ReplicaEvent) -> None:
        """A replica became ready or exited."""

    def demanded(self, model: str, adapter: str) -> None:
        """A proxy holds requests for LoRA adapter ``adapter`` of ``model``."""


class NoWatcher:
    """Nothing follows the Models."""

    def model_changed(self, model: str) -> None:
        """Nothing to tell."""

    def replica_changed(self, event: ReplicaEvent) -> None:
        """Nothing to tell."""

    def demanded(self, model: str, adapter: str) -> None:
        """Nothing to tell."""


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """The knobs the controller core needs (a slice of ControllerSettings)."""

    namespace: str
    instance_id: str
    workers: int
    resync_interval_s: float
    reclaim_idle_s: float
    stop_grace_s: float
    crash_backoff_initial_s: float
    crash_backoff_max_s: float
    crash_loop_limit: int
    crash_loop_window_s: float
    launch: LaunchContext
    sleep: SleepPolicy = field(default_factory=SleepPolicy)
    """Sleep instead of stop at zero replicas (off: budget 0)."""


class Controller:
    """Owns the runtime and drives reconciles from every trigger."""

    def __init__(
        self,
        config: ControllerConfig,
        *,
        store: ModelStore,
        bus: EventBus,
        runtime_factory: Callable[[ReplicaListener], Runtime],
        backends: BackendRegistry,
        metrics: ControllerMetrics | None = None,
        prestart: PreStart | None = None,
        inventory: GPUInventory | None = None,
        kv_check: KVCacheCheck | None = None,
        cache_factory: Callable[[Notify], ModelCache] | None = None,
        sources: Callable[[str], SourceResolution] | None = None,
        placer: Placer | None = None,
        shared_gpu: SharedGPUHook | None = None,
        reported: ReportedNodes | None = None,
        queue: WorkQueue | None = None,
        drainer: Drainer | None = None,
        events: ModelEvents | None = None,
        scaleout: ScaleOut | None = None,
    ) -> None:
        """``placer`` picks the GPUs of a replica (step 3; default: the placement core
        without benchmarks); ``shared_gpu`` arbitrates shared GPUs (step 4; default: no
        sharing) and hears the proxies' demand; ``reported`` holds the nodes the agents
        report on the bus, which join the fleet (default: a fresh one); ``queue`` is the
        work queue (given when the hook must reconcile Models through it); ``drainer``
        drains a preempted Model's engines before they stop (default: they stop at once);
        ``events`` records sleeps and wakes on the Models (default: the log).
        ``scaleout`` scales Models out by their engines' load (default: no readings, so
        none scales out)."""
        self._config = config
        self._store = store
        self._bus = bus
        self._metrics = metrics
        self.queue = queue if queue is not None else WorkQueue()
        self.shared_gpu: SharedGPUHook = shared_gpu or NoSharing()
        self.runtime = runtime_factory(self._on_replica_event)
        self._crashes = CrashTracker(
            initial_s=config.crash_backoff_initial_s,
            max_s=config.crash_backoff_max_s,
            limit=config.crash_loop_limit,
            window_s=config.crash_loop_window_s,
        )
        self.progress = ProgressReporter(bus)
        self.reported = reported or ReportedNodes()
        base = self.runtime.gpu_inventory() or inventory or DeclaredInventory([])
        self.inventory = FleetInventory(base, self.reported)
        """The GPUs placement sees: the runtime's fleet and the nodes agents report."""
        # The cache re-queues a Model when its download moves (the reconcile never waits).
        cache = self.runtime.model_cache(self._requeue)  # Kubernetes: the cache Jobs' gate
        if cache is None:
            cache = cache_factory(self._requeue) if cache_factory else NoRegistryCache()
        self.cache = cache
        self._backoff = Backoff(max_s=30.0)
        """A failed reconcile is retried after 0.1 s, doubling up to 30 s."""
        self.endpoints = EndpointPublisher(bus, store)
        """What the proxies are told of each Model's endpoints (the adapter loop adds
        which adapters each holds)."""
        self.reconciler = Reconciler(
            store=store,
            runtime=self.runtime,
            backends=backends,
            publisher=self.endpoints,
            crashes=self._crashes,
            queue=self.queue,
            launch_context=config.launch,
            progress=self.progress,
            metrics=metrics,
            prestart=prestart,
            inventory=self.inventory,
            kv_check=kv_check,
            cache=self.cache,
            sources=sources or resolve_source,
            backoff=self._backoff,
            placer=placer,
            shared_gpu=self.shared_gpu,
            sleep=config.sleep,
            drainer=drainer,
            events=events,
            scaleout=scaleout,
            traced=self._scale_up_trace,
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._loops: list[EventLoop] = []
        self.ready = False
        self.watcher: ModelWatcher = NoWatcher()
        """Told of Model changes, replica events and adapter demand (set by create_app)."""
        self.activations: ActivationTraces | None = None
        """Scale-up spans of traced demands (set by create_app when tracing is on)."""

    def _scale_up_trace(self, key: str) -> str | None:
        """The traceparent of ``key``'s open scale-up span, for the engines it starts."""
        return self.activations.traceparent(key) if self.activations is not None else None

    async def start(self) -> None:
        """Adopt engines, start workers and consumers, and queue every model."""
        adopted = await self.runtime.adopt()
        self._loops = [
            self._event_loop(topics.DEMAND, topics.DemandEvent),
            self._event_loop(topics.ACTIVITY, topics.ActivityEvent),
        ]
        for index in range(self._config.workers):
            work = run_worker(
                self.queue, self._timed_reconcile, self._backoff, "model", self._count_reconcile
            )
            self._spawn(work, f"reconcile-worker-{index}")
        for loop in self._loops:
            self._spawn(loop.run(), "controller-consumer")
        # Every replica sees every heartbeat (a group of its own), from the bus's history
        # on: the nodes beating now are known at once, not one interval after the start.
        group = f"controller-nodes-{self._config.instance_id}"
        nodes = self._bus.consumer(topics.NODES, group, self._config.instance_id, from_start=True)
        self._spawn(consume(self._bus, nodes, self._on_nodes, topic=topics.NODES), "node-feed")
        await self.resync()
        for replica in adopted:
            self.queue.add(replica.model)
        self._spawn(self._resync_loop(), "controller-resync")
        self.ready = True

    def _event_loop(self, topic: str, event_type: type[BaseModel]) -> EventLoop:
        return EventLoop(
            self._bus,
            topic,
            event_type,
            self._on_events,
            name=self._config.instance_id,
            reclaim_idle_s=self._config.reclaim_idle_s,
        )

    def _spawn(self, coro: object, name: str) -> None:
        assert asyncio.iscoroutine(coro)
        self._tasks.append(asyncio.create_task(coro, name=name))

    async def stop(self, *, stop_engines: bool) -> None:
        """Stop consumers and workers; stop engines too when ``stop_engines``."""
        self.ready = False
        self.queue.shut_down()
        for task in self._tasks:
            if not task.get_name().startswith("reconcile-worker"):
                task.cancel()
        if self._tasks:
            _, pending = await asyncio.wait(self._tasks, timeout=10)
            for task in pending:
                task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        await self.cache.close()
        await self.progress.close()
        await self.runtime.close(stop_replicas=stop_engines)

    def _requeue(self, key: str) -> None:
        self.queue.add(key)

    def enqueue(self, key: str) -> int:
        """Queue a reconcile of ``key``; the ticket can be awaited with ``wait``."""
        self.watcher.model_changed(key)
        return self.queue.add(key)

    async def sync(self, key: str, timeout_s: float = 30.0) -> bool:
        """Reconcile ``key`` and wait until that reconcile finished."""
        ticket = self.queue.add(key)
        return await self.queue.wait_done(key, ticket, timeout_s)

    def note_activity(self, key: str, at: datetime) -> int:
        """Record activity of ``key`` and reconcile it at once (the cold-start path)."""
        self.reconciler.note_activity(key, at)
        return self.queue.add(key)

    def _model_key(self, model: str) -> str:
        return model if "/" in model else f"{self._config.namespace}/{model}"

    async def _on_events(self, events: list[BaseModel]) -> None:
        now = utcnow()
        tickets: dict[str, int] = {}
        for event in events:
            if isinstance(event, topics.DemandEvent):
                key, at = self._model_key(event.model), now
                if event.adapter is not None:
                    self.watcher.demanded(key, event.adapter)
                if event.traceparent is not None:
                    self._traced_demand(key, event.traceparent)
            elif isinstance(event, topics.ActivityEvent):
                at = event.at if event.at.tzinfo else event.at.replace(tzinfo=UTC)
                key, at = self._model_key(event.model), min(at, now)
            else:
                continue
            self.shared_gpu.observe(event, key)
            tickets[key] = self.note_activity(key, at)
        # Ack only once the reconcile that persists lastActiveTime has run.
        await asyncio.gather(
            *(self.queue.wait_done(key, ticket, 30.0) for key, ticket in tickets.items())
        )

    async def _on_nodes(self, messages: list[Message]) -> None:
        changed = False
        for message in messages:
            try:
                event = topics.NodeInventoryEvent.model_validate(message.payload)
            except ValidationError as exc:
                log.warning("dropping malformed node event %s: %s", message.id, exc)
                continue
            changed = self.reported.observe(event) or changed
        if changed:
            self.gpus_changed()

    def _traced_demand(self, key: str, traceparent: str) -> None:
        """A cold start's scale-up joins the demanding request's trace (not when a replica
        already serves: the proxy just has not heard of it yet)."""
        ready = any(r.state is ReplicaState.READY for r in self.runtime.list(key))
        if self.activations is not None and not ready:
            self.activations.demanded(key, traceparent)

    def _on_replica_event(self, event: ReplicaEvent) -> None:
        replica = event.replica
        if self.activations is not None:
            self.activations.replica_event(replica.model, event.kind, event.expected)
        if event.kind == "exited" and not event.expected:
            self._crashes.record(replica.model, replica.generation, time.monotonic(), event.message)
            if self._metrics is not None:
                self._metrics.engine_crashes.inc()
        self.shared_gpu.engine_event(self._engine_change(event))
        self.queue.add(replica.model)
        self.watcher.replica_changed(event)
        if event.kind in ("exited", "slept") and replica.gpus is not None:
            self.gpus_changed()  # its GPUs are free: a waiting Model may take them

    def _engine_change(self, event: ReplicaEvent) -> EngineChange:
        """What the shared-GPU hook learns of a replica event (a crash: its backoff)."""
        replica = event.replica
        key, generation = replica.model, replica.generation
        if event.kind == "slept":
            return EngineChange(key, replica.id, generation, EngineKind.SLEPT, took_s=event.took_s)
        if event.kind != "exited":
            took = event.took_s
            if not event.woken and replica.ready_at is not None:
                took = replica.ready_at - replica.started_at
            ready = EngineKind.READY
            return EngineChange(key, replica.id, generation, ready, took_s=took, woken=event.woken)
        if event.expected:
            return EngineChange(key, replica.id, generation, EngineKind.STOPPED)
        now = time.monotonic()
        looping = self._crashes.crash_looping(key, generation, now)
        backoff = math.inf if looping else self._crashes.restart_delay(key, generation, now)
        return EngineChange(key, replica.id, generation, EngineKind.CRASHED, backoff_s=backoff)

    def gpus_changed(self) -> None:
        """GPUs freed or joined: reconcile the Models waiting for one now, not in 30 s."""
        for key in self.reconciler.gpu_waiters():
            self.queue.add(key)

    async def _timed_reconcile(self, key: str) -> None:
        if self._metrics is None:
            await self.reconciler.reconcile(key)
            return
        with self._metrics.reconcile_seconds.time():
            await self.reconciler.reconcile(key)

    def _count_reconcile(self, ok: bool) -> None:
        if self._metrics is not None:
            self._metrics.reconciles.labels("ok" if ok else "error").inc()

    async def resync(self) -> None:
        """Queue every stored model and every model the runtime runs (or sleeps) replicas of."""
        keys = {m.key for m in await self._store.list_models()}
        keys |= {r.model for r in [*self.runtime.list(), *self.runtime.sleepers()]}
        for key in sorted(keys):
            self.queue.add(key)

    async def _resync_loop(self) -> None:
        while True:
            await asyncio.sleep(self._config.resync_interval_s)
            try:
                await self.resync()
            except FlexInferError as exc:
                log.warning("resync failed: %s", exc)
            for loop in self._loops:
                await loop.reclaim()
            for node in self.reported.forget_stale():
                log.info("node %s stopped reporting: its GPUs left the fleet", node)
