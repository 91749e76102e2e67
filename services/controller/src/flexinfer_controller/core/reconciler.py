"""Reconcile one model: read it, decide desired replicas, act on the runtime, write status.

Level-triggered and idempotent: every decision is made from the stored Model and the
runtime's live replica list, never from the event that triggered the reconcile, so running
it twice, late or for no reason changes nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

from flexinfer_common.api import Model, ModelPhase, ModelStatus
from flexinfer_common.api.meta import utcnow
from flexinfer_common.api.operations import unloaded_at
from flexinfer_common.api.status import blocked_reason
from flexinfer_common.errors import (
    ConflictError,
    FlexInferError,
    NotFoundError,
    PermanentError,
    TemporaryError,
)
from flexinfer_common.store import ModelStore
from flexinfer_controller.backends import (
    BackendRegistry,
    LaunchContext,
)
from flexinfer_controller.core.autoscaler import Autoscaler, NoInFlight
from flexinfer_controller.core.cache import (
    ModelCache,
    NoRegistryCache,
)
from flexinfer_controller.core.crashes import CrashTracker
from flexinfer_controller.core.desired import busy_until
from flexinfer_controller.core.endpoints import EndpointPublisher
from flexinfer_controller.core.events import ModelEvents
from flexinfer_controller.core.failures import Failures
from flexinfer_controller.core.finalizer import ensure_finalizer, release_finalizer
from flexinfer_controller.core.gpu import (
    RECHECK_S,
    DeclaredInventory,
    GPUInventory,
    Placer,
)
from flexinfer_controller.core.kvcache import KVCacheCheck, NoEngineMetrics
from flexinfer_controller.core.metrics import ControllerMetrics
from flexinfer_controller.core.placement import CorePlacer
from flexinfer_controller.core.planner import Plan, Planner
from flexinfer_controller.core.prestart import NoPreStart, PreStart
from flexinfer_controller.core.progress import ProgressReporter, report_progress
from flexinfer_controller.core.queue import WorkQueue
from flexinfer_controller.core.scaleout import ScaleOut
from flexinfer_controller.core.sharing import NoSharing, SharedGPUHook
from flexinfer_controller.core.sharing.drain import Drainer
from flexinfer_controller.core.sleep import SleepKeeper
from flexinfer_controller.core.sleepbook import SleepPolicy
from flexinfer_controller.core.sources import SourceResolution, resolve_source
from flexinfer_controller.core.starter import ReplicaStarter
from flexinfer_controller.core.status import (
    build_external_status,
    build_status,
    phase_change,
)
from flexinfer_controller.core.workers import Backoff
from flexinfer_controller.runtime import Replica, ReplicaState, Runtime

log = logging.getLogger(__name__)

_MAX_CONFLICT_RETRIES = 5


class Reconciler:
    """Reconciles one model key at a time (the WorkQueue guarantees no key runs twice)."""

    def __init__(
        self,
        *,
        store: ModelStore,
        runtime: Runtime,
        backends: BackendRegistry,
        publisher: EndpointPublisher,
        crashes: CrashTracker,
        queue: WorkQueue,
        launch_context: LaunchContext,
        progress: ProgressReporter,
        metrics: ControllerMetrics | None = None,
        prestart: PreStart | None = None,
        inventory: GPUInventory | None = None,
        placer: Placer | None = None,
        cache: ModelCache | None = None,
        kv_check: KVCacheCheck | None = None,
        sources: Callable[[str], SourceResolution] = resolve_source,
        backoff: Backoff | None = None,
        shared_gpu: SharedGPUHook | None = None,
        sleep: SleepPolicy | None = None,
        drainer: Drainer | None = None,
        events: ModelEvents | None = None,
        scaleout: ScaleOut | None = None,
        traced: Callable[[str], str | None] = lambda key: None,
    ) -> None:
        self._store = store
        self.autoscaler = Autoscaler(
            scaleout or ScaleOut(NoInFlight(), clock=time.monotonic), queue, metrics
        )
        """Scales out between minReplicas and maxReplicas by the engines' load."""
        self._drainer = drainer
        """Drains a preempted Model's engines before they stop (None: they stop at once)."""
        # The workers' backoff: a failure's status tells the delay the worker will use.
        self._failures = Failures(backoff or Backoff(max_s=30.0))
        self._cache: ModelCache = cache or NoRegistryCache()
        self._planner = Planner(
            backends=backends,
            sources=sources,
            cache=self._cache,
            inventory=inventory or DeclaredInventory([]),
            placer=placer or CorePlacer(),
            context=launch_context,
            crashes=crashes,
            queue=queue,
            sharing=shared_gpu or NoSharing(),
            holds=runtime.gpu_holds,
            busy=runtime.gpu_busy,
            scale=self.autoscaler.count,
        )
        self._kv = kv_check or KVCacheCheck(NoEngineMetrics())
        self._prestart: PreStart = prestart or NoPreStart()
        self._starter = ReplicaStarter(
            planner=self._planner,
            runtime=runtime,
            crashes=crashes,
            queue=queue,
            prestart=self._prestart,
            metrics=metrics,
            traced=traced,
        )
        self._runtime = runtime
        self._backends = backends
        self._publisher = publisher
        self._crashes = crashes
        self._queue = queue
        self._metrics = metrics
        self._progress = progress
        self._activity: dict[str, datetime] = {}
        self.sleep = SleepKeeper(
            runtime=runtime,
            planner=self._planner,
            queue=queue,
            policy=sleep or SleepPolicy(),
            events=events,
        )
        """Sleeps replicas instead of stopping them at zero, and wakes them (issue 13)."""

    def gpu_waiters(self) -> list[str]:
        """Models waiting for a GPU to free (queue them when one does)."""
        return sorted(self._planner.waiting)

    def note_activity(self, key: str, at: datetime) -> None:
        """Remember that ``key`` was active at ``at`` (moves forward only)."""
        if at.tzinfo is None:
            at = at.replace(tzinfo=UTC)
        previous = self._activity.get(key)
        if previous is None or at > previous:
            self._activity[key] = at

    async def reconcile(self, key: str) -> None:
        """Converge ``key``: re-read and redo on write conflicts."""
        namespace, _, name = key.partition("/")
        for _ in range(_MAX_CONFLICT_RETRIES):
            try:
                model = await self._store.get_model(namespace, name)
            except NotFoundError:
                await self._teardown(key)
                return
            try:
                if model.metadata.deletion_timestamp is not None:
                    await self._teardown(key)
                    await release_finalizer(self._store, model)
                    return
                await self._converge(model)
                return
            except ConflictError:
                log.debug("status of %s changed while reconciling; retrying", key)
        raise TemporaryError(f"{key}: the stored model kept changing during reconcile", delay=0.5)

    async def _converge(self, model: Model) -> None:
        """Reconcile a live Model; a failure is told in its status (see ``failures``)."""
        if self._failures.held(model):
            return  # a PermanentError was written for this spec: only a new one is tried
        wait = self._failures.wait_s(model)
        if wait > 0:
            self._queue.add_after(model.key, wait)  # its retry is due then, not before
            return
        try:
            model = await ensure_finalizer(self._store, model)
            await self._reconcile_model(model)
        except ConflictError:
            raise  # the stored Model changed under us: read it again
        except PermanentError as exc:
            await self._write_status(model, self._failures.permanent(model, exc))
            self._failures.hold(model)
            return
        except Exception as exc:
            told = self._failures.retrying(model, exc)
            if told is not None:
                await self._tell(model, told)
            raise  # the worker queues the retry
        self._failures.succeeded(model.key)

    async def _tell(self, model: Model, status: ModelStatus) -> None:
        """Write a retried failure's status; the failure itself is what the caller raises."""
        try:
            await self._write_status(model, status)
        except FlexInferError as exc:  # the store may be what failed
            log.debug("cannot write the failure of %s to status: %s", model.key, exc)

    def _last_active(self, model: Model) -> datetime | None:
        stored, noted = model.status.last_active_time, self._activity.get(model.key)
        if stored is not None and stored.tzinfo is None:
            stored = stored.replace(tzinfo=UTC)
        candidates = [t for t in (stored, noted) if t is not None]
        return max(candidates) if candidates else None

    async def _reconcile_model(self, model: Model) -> None:
        key = model.key
        generation = model.metadata.generation or 1
        last_active = self._last_active(model)
        replicas = self._runtime.list(key)
        if model.spec.is_external:
            await self._reconcile_external(model, replicas, last_active)
            return
        active_at = busy_until(last_active, replicas, unloaded_at(model.metadata))
        await self.autoscaler.look(model, replicas, self._metrics_path(model))
        plan, replicas = await self._plan(model, active_at, replicas)
        await self.sleep.tend(model)  # after the renewal: it stops sleepers of older specs
        verdict, desired = plan.verdict, plan.desired
        if self._metrics is not None:
            self._metrics.desired(key, desired, len(replicas))
        # A cold start: replicas are wanted and none serves yet (the proxy queues requests).
        cold = not any(r.state is ReplicaState.READY for r in replicas)
        current = [r for r in replicas if r.generation == generation]
        stale = [r for r in replicas if r.generation != generation]
        to_stop: list[Replica] = []
        if desired == 0:
            to_stop = list(replicas)
        else:
            current += await self.sleep.wake(model, desired - len(current))
            if len(current) > desired:
                keep = sorted(current, key=self._keep_first(key))[:desired]
                to_stop += [r for r in current if r not in keep]
                current = keep
            elif len(current) < desired and plan.launch is not None:
                if cold:
                    self._progress.scheduled(key)
                started, verdict = await self._starter.start(model, plan, desired - len(current))
                if started and cold:
                    self._progress.loading(key)
                current += started
            ready_now = sum(r.state is ReplicaState.READY for r in current)
            stale_ready = any(r.state is ReplicaState.READY for r in stale)
            # Replace on spec change: start new replicas, stop old ones once the new serve.
            if stale and (ready_now >= desired or not stale_ready):
                to_stop += stale
                stale = []
        to_stop, draining = await self._hold_back(model, plan, to_stop)
        leaving = {r.id for r in to_stop} | draining
        running = current + [r for r in stale if r not in to_stop]
        status = build_status(
            model,
            verdict,
            desired=desired,
            replicas=running,
            last_active=last_active,
            sleeping=self.sleep.sleeping(key),
        )
        status = self.autoscaler.status(model, status, utcnow(), verdict.waiting)
        ready = [r for r in running if r.state is ReplicaState.READY]
        status = await self._with_kv_cache(model, status, ready)
        # Replicas on their way out serve no new request: withdrawn before they stop.
        serving = [r for r in ready if r.id not in leaving]
        await self._publisher.sync(
            key, serving, status.phase.value, blocked_reason(status), adapters=self._takes(model)
        )
        held = plan.verdict.shared is not None
        report_progress(self._progress, model, status, ready, active_at, plan.download, held)
        to_stop = await self.sleep.spare(model, to_stop, desired, plan.model_dir)
        for replica in to_stop:
            await self._runtime.stop(replica.id)
        # ensureService/ensureDeployment before status, as the seed: a status that reports
        # this generation means the runtime's objects were converged to it.
        await self._runtime.ensure(model, verdict.gpu)
        await self._write_status(model, status)
        await self._prune(key)

    async def _plan(
        self, model: Model, active_at: datetime | None, replicas: list[Replica]
    ) -> tuple[Plan, list[Replica]]:
        """The plan, after replicas of an unchanged rendering were carried over to the new
        generation (``core.rollout``); the replicas as they are then."""
        plan = await self._planner.plan(model, active_at)
        generation = model.metadata.generation or 1
        if plan.launch is None or not self._runtime.renew(
            model.key, generation, plan.launch.template_hash
        ):
            return plan, replicas
        # The planner counts its GPU holds by generation: plan again with the renewed ones.
        return await self._planner.plan(model, active_at), self._runtime.list(model.key)

    def _keep_first(self, key: str) -> Callable[[Replica], tuple[bool, bool]]:
        """The order in which a scale-in keeps replicas: ready ones, then those not draining
        already (a drain goes on with the replicas it chose, never flapping to others)."""
        draining = set(self._drainer.draining(key)) if self._drainer is not None else set()
        return lambda r: (r.state is not ReplicaState.READY, r.id in draining)

    async def _hold_back(
        self, model: Model, plan: Plan, to_stop: list[Replica]
    ) -> tuple[list[Replica], set[str]]:
        """The replicas to stop now, and those a preempted Model keeps while they drain."""
        if self._drainer is None:
            return to_stop, set()
        path = self._metrics_path(model)
        return await self._drainer.hold_back(model.key, plan.verdict.shared, to_stop, path)

    def _metrics_path(self, model: Model) -> str | None:
        """The path of ``model``'s engines' metrics page (None: its backend has none)."""
        backend = self._backends.get(model.spec.backend)
        return backend.metrics_path if backend is not None else None

    def _takes(self, model: Model) -> bool:
        """Whether ``model``'s engines take LoRA adapters (its endpoints say which)."""
        backend = self._backends.get(model.spec.backend)
        return backend is not None and backend.lora is not None

    async def _with_kv_cache(
        self, model: Model, status: ModelStatus, ready: list[Replica]
    ) -> ModelStatus:
        """Post-reconcile: the KV-cache pressure check, then the seed's 30 s requeue so
        that the readings stay fresh while replicas serve."""
        path = self._metrics_path(model)
        urls = [f"{r.url.rstrip('/')}{path}" for r in ready if r.url and path]
        if not urls:
            return status
        self._queue.add_after(model.key, RECHECK_S)
        return status.model_copy(update={"kv_cache": await self._kv.check(model, urls)})

    async def _prune(self, key: str) -> None:
        """Post-reconcile: delete what failed replicas left behind (Kubernetes: Failed pods)."""
        pruned = await self._runtime.prune(key)
        if pruned and self._metrics is not None:
            self._metrics.pruned_replicas.inc(len(pruned))

    async def _write_status(self, model: Model, status: ModelStatus) -> None:
        if status.model_dump() != model.status.model_dump():
            await self._store.update_status(
                model.metadata.namespace,
                model.metadata.name,
                status,
                resource_version=model.metadata.resource_version,
            )
            # Told after the write: a write that lost a conflict is redone, and told then.
            change = phase_change(model.key, model.status, status)
            if change is not None:
                log.log(*change)
        if self._metrics is not None:
            self._metrics.observe_replicas(self._runtime.list())
            self._metrics.models.set(model.key, status.phase.value)

    async def _reconcile_external(
        self, model: Model, replicas: list[Replica], last_active: datetime | None
    ) -> None:
        """spec.endpoints serve the model: publish them, run nothing, report Ready."""
        key = model.key
        urls = [(f"external-{i:02d}", url) for i, url in enumerate(model.spec.endpoints or [])]
        await self._publisher.sync_urls(key, urls, ModelPhase.READY.value)
        self._progress.abandon(key)
        # The model may have run engines before spec.endpoints was set: they serve no one now.
        for replica in replicas:
            await self._runtime.stop(replica.id)
        await self._write_status(model, build_external_status(model, last_active=last_active))

    async def _teardown(self, key: str) -> None:
        """The model is gone: withdraw its endpoints, then stop its replicas."""
        replicas = self._runtime.list(key)
        # Stored records too: a previous controller may have published them (external models
        # have no replica that would tell us).
        if replicas or self._publisher.known(key) or await self._store.list_endpoints(key):
            await self._publisher.clear(key)
        for replica in replicas:
            await self._runtime.stop(replica.id)
        await self.sleep.forget(key)
        if self._metrics is not None:
            self._metrics.forget(key)
        await self._runtime.release(key)
        await self._prestart.release(key)
        await self._cache.release(key)
        self._activity.pop(key, None)
        self.autoscaler.forget(key)
        if self._drainer is not None:
            self._drainer.forget(key)
        self._planner.forget(key)
        self._failures.forget(key)
        self._crashes.forget(key)
        self._progress.forget(key)
