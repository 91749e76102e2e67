"""What the spec alone says of a Model: the verdict, how to launch it, how many, from where.

The reconcile's steps before anything is started, in the seed's order: the backend from
the plugin registry, the source (and, for a remote one, the cache's download), detectGPU
and the compatibility check (which GPUs: the ``Placer``, the scheduler's placement core),
the launch rendered for where the Model was placed, crash loops, the desired replicas (the
idle rule's, raised by the load: ``scale``), and what the shared-GPU hook (``sharing``)
lets of them run. ``Planner.plan`` reads state and queues rechecks; it starts nothing, so
running it again changes nothing (a stateful hook aside, which arbitrates again the same
way, and the scale-out window, which a look adds to only once a tick).

Where the runtime pins GPUs (local mode: ``Runtime.gpu_holds``), a Model whose replicas
run is placed where they run; one with none is placed afresh against the GPUs other
replicas hold, and each replica the reconcile starts gets its GPUs from ``assign``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from flexinfer_common.api import Model
from flexinfer_common.api.meta import utcnow
from flexinfer_common.api.status import CacheStatus as ApiCacheStatus
from flexinfer_common.api.status import GPUStatus
from flexinfer_common.errors import InvalidSpecError
from flexinfer_controller.backends import (
    Backend,
    BackendRegistry,
    LaunchContext,
    LaunchSpec,
    UnsupportedBackendError,
    launch,
)
from flexinfer_controller.core.cache import CacheState, CacheStatus, DownloadProgress, ModelCache
from flexinfer_controller.core.crashes import CrashTracker
from flexinfer_controller.core.desired import desired_replicas
from flexinfer_controller.core.gpu import (
    RECHECK_S,
    GPUAssignment,
    GPUInventory,
    GPURequest,
    Hold,
    Placement,
    Placer,
    Unplaced,
    place,
)
from flexinfer_controller.core.queue import WorkQueue
from flexinfer_controller.core.rollout import template_hash
from flexinfer_controller.core.sharing import SharedGPUHook
from flexinfer_controller.core.sharing.handover import hand_over
from flexinfer_controller.core.sources import SourceResolution, SourceState, source_hold
from flexinfer_controller.core.status import Verdict
from flexinfer_controller.core.vram import VramEstimates

REGISTRY_STRATEGY = "Registry"
"""status.cache.strategy of a source the local runtime fetches through the registry."""
_IDLE_SLACK_S = 0.01
"""Reconcile just after the idle deadline so the comparison sees it expired."""
_PULLED = SourceResolution(
    SourceState.READY, reason="Cached", message="the backend pulls the model itself"
)


@dataclass(frozen=True, slots=True)
class Plan:
    """What the spec alone says: the verdict, how to launch, how many, and from where."""

    verdict: Verdict
    launch: LaunchSpec | None = None
    desired: int = 0
    model_dir: Path | None = None
    """The model directory the launch was rendered with (None: the backend pulls)."""
    download: DownloadProgress | None = None
    """How far the cache's download of a remote source got (None: none running)."""
    context: LaunchContext | None = field(default=None, compare=False)
    """The launch context with the placement, to render the launch again from a copy."""


@dataclass(frozen=True, slots=True)
class Planner:
    """The reconcile's read-only steps, from the backend to the desired replicas."""

    backends: BackendRegistry
    sources: Callable[[str], SourceResolution]
    cache: ModelCache
    inventory: GPUInventory
    placer: Placer
    context: LaunchContext
    crashes: CrashTracker
    queue: WorkQueue
    sharing: SharedGPUHook
    holds: Callable[[], list[Hold] | None] = lambda: None
    """The GPUs the runtime's replicas hold (None: the runtime does not pin GPUs)."""
    busy: Callable[[str], bool] = lambda key: False
    """Whether Model ``key``'s engines still hold their GPU (``Runtime.gpu_busy``): a swap's
    winner starts only once its losers' do not (``sharing.handover``)."""
    estimates: VramEstimates = field(default_factory=VramEstimates)
    """VRAM estimates from the Models' files, for those whose spec sets none."""
    scale: Callable[[Model, int], int] = lambda _model, floor: floor
    """Raises the idle rule's count by the load (scale-out; core/autoscaler.py)."""
    waiting: set[str] = field(default_factory=set)
    """Models waiting for a GPU: queued again when one frees or a node joins
    (``Controller.gpus_changed``)."""

    def relaunch(self, model: Model, plan: Plan, model_dir: Path) -> LaunchSpec:
        """The plan's launch rendered again for ``model_dir`` (a pre-start copy)."""
        backend = self.backends.get(model.spec.backend)
        assert backend is not None  # the plan was made with it
        return launch(backend, model, model_dir, plan.context or self.context)

    async def plan(self, model: Model, active_at: datetime | None) -> Plan:
        """The verdict, how to launch and the desired replicas, from the spec alone."""
        backend = self.backends.get(model.spec.backend)
        if backend is None:
            known = ", ".join(self.backends.names())
            message = f"unknown backend {model.spec.backend!r}; known backends: {known}"
            return Plan(Verdict(config_valid=(False, "BackendUnsupported", message)))
        hold = source_hold(model.metadata.annotations)
        if hold is not None:
            # Not placed either: with no GPU status the runtime renders no Deployment or
            # Job, so nothing can start or fetch what the hold's writer will name instead.
            cached = (False, hold.reason, hold.message)
            return Plan(Verdict(cached=cached, cache_failed=hold.failed))
        source, cache = self._resolve(model, backend)
        detail = cache_status(cache)
        if cache is not None and cache.status is CacheStatus.FAILED:
            return await self._cache_failed(model, backend, cache, detail)
        if source.state is SourceState.INVALID:
            return Plan(Verdict(config_valid=(False, source.reason, source.message)))
        if source.state is SourceState.READY:
            self.estimates.learn(model, backend, source.path)
        model = self.estimates.apply(model)
        gpu = await self._place(model, backend)
        if isinstance(gpu, Verdict) and gpu.placement_pending:
            gpu = await self._shared_hold(model, active_at, gpu)
        rendered = self._launch(model, backend, source.path, gpu)
        if isinstance(rendered, Verdict):
            return Plan(rendered)
        if isinstance(gpu, Verdict):
            return Plan(gpu)
        if source.state is SourceState.PENDING:
            # Cache gate, as the operator: no replicas until the weights are in place.
            download = cache.progress if cache is not None else None
            pending = (False, source.reason, source.message)
            return Plan(Verdict(cached=pending, cache=detail, gpu=gpu), download=download)
        return await self._ready(model, active_at, source, detail, gpu, rendered)

    def _resolve(
        self, model: Model, backend: Backend
    ) -> tuple[SourceResolution, CacheState | None]:
        """Where the weights are, and the cache's state for a remote source (else None)."""
        # A backend that pulls its model itself (Ollama) has no directory to wait for.
        source = self.sources(model.spec.source) if backend.needs_volume else _PULLED
        if source.state is not SourceState.REMOTE:
            return source, None
        cache = self.cache.ensure(model)
        return _resolution(cache), cache

    async def _cache_failed(
        self, model: Model, backend: Backend, cache: CacheState, detail: ApiCacheStatus | None
    ) -> Plan:
        """The cache's download failed: said, and the Model still placed."""
        # Still placed: the runtime keeps converging the Model's objects, so it can run
        # a failed cache Job again once its backoff has passed (Kubernetes).
        placed = await self._place(model, backend)
        gpu = placed if isinstance(placed, GPUStatus) else None
        cached = (False, cache.reason, cache.message)
        return Plan(Verdict(cached=cached, cache_failed=True, cache=detail, gpu=gpu))

    async def _ready(
        self,
        model: Model,
        active_at: datetime | None,
        source: SourceResolution,
        detail: ApiCacheStatus | None,
        gpu: GPUStatus,
        rendered: tuple[LaunchSpec, LaunchContext],
    ) -> Plan:
        """The weights are in place: crash loops, then the desired replicas, as many as the
        shared-GPU hook lets run."""
        launch_spec, ctx = rendered
        cached = (True, "Cached", source.message or f"model directory {source.path}")
        looping = self._crash_loop(model)
        if looping is not None:
            return Plan(Verdict(cached=cached, crash_loop=looping, cache=detail, gpu=gpu))
        wanted = desired_replicas(model.spec, active_at, utcnow())
        if wanted.idle_at is not None:
            delay = (wanted.idle_at - utcnow()).total_seconds() + _IDLE_SLACK_S
            self.queue.add_after(model.key, delay)
        # Scale-out before the hook: a shared GPU caps what the load asks for.
        shared = await self.sharing.arbitrate(model, gpu, self.scale(model, wanted.replicas))
        shared = hand_over(shared, self.busy)
        if shared.recheck_s is not None:
            self.queue.add_after(model.key, shared.recheck_s)
        verdict = Verdict(
            cached=cached, cache=detail, gpu=gpu, shared=shared.verdict, shared_group=shared.group
        )
        return Plan(verdict, launch_spec, max(0, shared.replicas), source.path, context=ctx)

    async def _shared_hold(
        self, model: Model, active_at: datetime | None, unplaced: Verdict
    ) -> Verdict:
        """An unplaced member of a shared group, with what the hook says of it: the GPU its
        group holds is what keeps it off, so it shows Preempted or queued, not just Pending.
        Every unplaced Model is asked: the hook knows the groups (a GPUGroup's members need
        no ``gpu.shared``), and says nothing of a Model in none.
        """
        looping = self._crash_loop(model)
        if looping is not None:  # Failed, as when placed: only a new spec retries it
            return replace(unplaced, crash_loop=looping)
        wanted = desired_replicas(model.spec, active_at, utcnow())
        shared = await self.sharing.arbitrate(model, GPUStatus(), wanted.replicas)
        if shared.recheck_s is not None:
            self.queue.add_after(model.key, shared.recheck_s)
        return replace(unplaced, shared=shared.verdict, shared_group=shared.group)

    def _crash_loop(self, model: Model) -> str | None:
        """Why the Model's engine is not started again (it crashed too often), or None."""
        generation = model.metadata.generation or 1
        crashes = self.crashes.crash_looping(model.key, generation, time.monotonic())
        if not crashes:
            return None
        last = self.crashes.last_message(model.key)
        message = f"engine crashed {crashes} times; fix the spec to retry. Last: {last}"
        return message[:2000]

    def _launch(
        self, model: Model, backend: Backend, model_dir: Path | None, gpu: GPUStatus | Verdict
    ) -> tuple[LaunchSpec, LaunchContext] | Verdict:
        """The launch rendered for where detectGPU placed the Model, or why it cannot be.

        detectGPU comes first (a backend's flags and image depend on the vendor); a backend
        that is not installed still says so before a wait for a node, since only installing
        it helps, while the wait may end by itself.
        """
        ctx = self.context
        if isinstance(gpu, GPUStatus):
            ctx = replace(ctx, vendor=gpu.vendor, arch=gpu.architecture)
        try:
            rendered = launch(backend, model, model_dir, ctx)
        except InvalidSpecError as exc:
            if isinstance(gpu, Verdict) and exc.field == "spec.gpu.vendor":
                return gpu  # incomplete only for want of a detected vendor
            return Verdict(config_valid=(False, "ConfigInvalid", str(exc)))
        except UnsupportedBackendError as exc:  # not installed: the message says what to do
            return Verdict(schedulable=(False, "BackendUnsupported", str(exc)))
        return replace(rendered, template_hash=template_hash(model, rendered)), ctx

    async def _place(self, model: Model, backend: Backend) -> GPUStatus | Verdict:
        """detectGPU and the compatibility check: the GPU status, or the verdict why not.

        A model that cannot be placed is looked at again in 30 s (the seed's requeue), and
        at once when a replica frees its GPUs: nodes join, GPUs free, a fitting one appears.
        """
        holds = self.holds()
        generation = model.metadata.generation or 1
        own = [h for h in holds or () if (h.model, h.generation) == (model.key, generation)]
        if own:  # placed already: where its replicas run
            self.waiting.discard(model.key)
            return gpu_status(own[0].assignment)
        placed = await self._decide(model, backend, holds)
        if isinstance(placed, Unplaced):
            self._wait(model.key)
            schedulable = (False, placed.reason, placed.message)
            return Verdict(schedulable=schedulable, placement_pending=not placed.permanent)
        self.waiting.discard(model.key)
        node = placed.node
        if node is None:  # the CPU, or a fleet this controller does not see
            return GPUStatus(vendor=None if placed.vendor == "auto" else placed.vendor)
        assignment = _assignment(model, placed)
        if assignment is not None:
            return gpu_status(assignment)
        return GPUStatus(
            node=node.node, vendor=node.vendor, architecture=node.arch, memory_mb=node.vram_mb
        )

    async def assign(self, model: Model) -> GPUAssignment | Unplaced | None:
        """The GPUs of one more replica of ``model`` now (None: the runtime pins none, or
        the Model runs on the CPU), or why no GPU can take it."""
        model = self.estimates.apply(model)
        backend = self.backends.get(model.spec.backend)
        holds = self.holds()
        if backend is None or holds is None:
            return None
        placed = await self._decide(model, backend, holds)
        if isinstance(placed, Unplaced):
            self._wait(model.key)
            return placed
        return _assignment(model, placed)

    async def fits_again(self, model: Model, gpus: GPUAssignment | None) -> bool:
        """Whether a sleeping replica's pinned GPUs have room for it again: the placement
        a fresh start would face (the GPUs other replicas hold included), on those GPUs."""
        holds = self.holds()
        backend = self.backends.get(model.spec.backend)
        if gpus is None or holds is None or backend is None:
            return True  # not pinned: nothing of the GPUs' to check
        own = [n for n in self.inventory.nodes() or () if n.node == gpus.node]
        fleet = [replace(n, count=len(gpus.devices), indices=gpus.devices) for n in own]
        model = self.estimates.apply(model)
        request = gpu_request(model, backend)
        placed = await place(model.spec.gpu_or_default, fleet, backend, self.placer, request, holds)
        return isinstance(placed, Placement) and set(placed.devices or ()) == set(gpus.devices)

    def forget(self, key: str) -> None:
        """The Model is gone: it waits for no GPU, and leaves its shared group."""
        self.waiting.discard(key)
        self.sharing.forget(key)
        self.estimates.forget(key)

    def _wait(self, key: str) -> None:
        self.waiting.add(key)
        self.queue.add_after(key, RECHECK_S)

    async def _decide(
        self, model: Model, backend: Backend, holds: Sequence[Hold] | None
    ) -> Placement | Unplaced:
        """One placement decision; a new spec's replicas may take the GPUs of the old
        replicas they replace (those stop once the new ones serve) when nothing else fits."""
        spec = model.spec.gpu_or_default
        fleet, request = self.inventory.nodes(), gpu_request(model, backend)
        placed = await place(spec, fleet, backend, self.placer, request, holds)
        if not isinstance(placed, Unplaced) or not holds:
            return placed
        generation = model.metadata.generation or 1
        others = [h for h in holds if h.model != model.key or h.generation == generation]
        if len(others) == len(holds):
            return placed
        retry = await place(spec, fleet, backend, self.placer, request, others)
        return placed if isinstance(retry, Unplaced) else retry


def _assignment(model: Model, placed: Placement) -> GPUAssignment | None:
    """The pinned GPUs of a placement (None: not pinned)."""
    if placed.node is None or placed.devices is None:
        return None
    spec = model.spec.gpu_or_default
    return GPUAssignment(
        node=placed.node.node,
        vendor=placed.node.vendor,
        devices=placed.devices,
        shared=spec.shared,
        reserved_mb=spec.vram_estimate_mb,
        arch=placed.node.arch,
        vram_mb=placed.node.vram_mb,
    )


def gpu_request(model: Model, backend: Backend) -> GPURequest:
    """What ``model``'s replica asks of the GPUs, for placement."""
    spec = model.spec.gpu_or_default
    return GPURequest(
        namespace=model.metadata.namespace,
        name=model.metadata.name,
        backend=backend.name,
        count=spec.effective_count,
        vram_estimate_mb=spec.vram_estimate_mb,
        shared=spec.shared,
    )


def gpu_status(assignment: GPUAssignment) -> GPUStatus:
    """status.gpu of pinned GPUs."""
    return GPUStatus(
        node=assignment.node,
        device=assignment.device,
        vendor=assignment.vendor,
        architecture=assignment.arch,
        memory_mb=assignment.vram_mb,
    )


def cache_status(cache: CacheState | None) -> ApiCacheStatus | None:
    """status.cache for a remote source: ready, the message, and the size once known."""
    if cache is None:
        return None
    size = cache.progress.bytes_total if cache.progress is not None else None
    ready = cache.status is CacheStatus.READY
    strategy = cache.strategy or REGISTRY_STRATEGY
    return ApiCacheStatus(strategy=strategy, ready=ready, message=cache.message, size_bytes=size)


def _resolution(cache: CacheState) -> SourceResolution:
    """The cache's answer as a source resolution (FAILED is handled by the caller)."""
    if cache.status is CacheStatus.READY:
        return SourceResolution(SourceState.READY, cache.path, cache.reason, cache.message)
    return SourceResolution(SourceState.PENDING, reason=cache.reason, message=cache.message)
