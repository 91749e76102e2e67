"""Runtimes by name: a name->plugin registry (``local`` and ``kubernetes``).

A plugin gives the runtime, its pre-start step, how a Model's source is resolved, and
where Models come from. Local mode copies a model to tmpfs before it spawns the engine
and keeps Models in the SQL store; on Kubernetes the Deployment's init container does the
copy, the cluster's cache holds the weights, and Models are custom resources watched
through the apiserver.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol

from flexinfer_common.errors import ConfigError
from flexinfer_common.store import ModelStore, create_store
from flexinfer_controller.catalog.secrets import DirectorySecrets
from flexinfer_controller.catalog.wiring import CatalogSources
from flexinfer_controller.core.adapters import AdapterFeed, NoAdapterFeed
from flexinfer_controller.core.cache import Notify
from flexinfer_controller.core.events import LogEvents, ModelEvents
from flexinfer_controller.core.feed import ModelFeed, NoFeed
from flexinfer_controller.core.gpu import (
    DeclaredInventory,
    GPUInventory,
    NodeGPU,
    UnknownInventory,
    declared_labels,
    parse_vram_mb,
)
from flexinfer_controller.core.lora.roots import AdapterRoots
from flexinfer_controller.core.lora.sources import AdapterCache
from flexinfer_controller.core.prestart import NoPreStart, PreStart, PreStartChain
from flexinfer_controller.core.sharing.gpugroups import GPUGroupWiring
from flexinfer_controller.core.sources import SourceResolution, resolve_source
from flexinfer_controller.runtime.base import ReplicaListener, Runtime
from flexinfer_controller.settings import ControllerSettings

RuntimeFactory = Callable[[ControllerSettings, ReplicaListener], Runtime]
PreStartFactory = Callable[[ControllerSettings], PreStart]
InventoryFactory = Callable[[ControllerSettings], GPUInventory]
ModelSource = Callable[
    [ControllerSettings], AbstractAsyncContextManager[tuple[ModelStore, ModelFeed]]
]
"""Opens the Model store and the feed of its changes; closes them when the block ends."""
CatalogSourcesFactory = Callable[[ControllerSettings, ModelStore], CatalogSources]
"""Where catalogs read Secrets and learn of changes, given the opened store."""
AdapterFeedFactory = Callable[[ControllerSettings, ModelStore], AdapterFeed]
"""Where the controller learns of LoRAAdapter changes not made through its admin API."""
AdapterCacheFactory = Callable[[ControllerSettings, Notify], AdapterCache]
"""Where remote LoRAAdapter sources are fetched, re-queueing the base Model via ``Notify``."""
AdapterRootsFactory = Callable[[ControllerSettings], AdapterRoots]
EventsFactory = Callable[[ControllerSettings, ModelStore], ModelEvents]
"""Where Events on Models are written, given the opened store."""
"""Where engines may load LoRAAdapters from: the operator's roots and the runtime's own."""


class BackgroundLoop(Protocol):
    """A loop the controller's lifespan starts and stops (the legacy kinds' loops)."""

    async def start(self) -> None:
        """Start its tasks."""

    async def stop(self) -> None:
        """Stop them."""


class Loops:
    """Several loops started in order and stopped in reverse (none: nothing runs)."""

    def __init__(self, *loops: BackgroundLoop) -> None:
        self._loops = loops

    async def start(self) -> None:
        """Start each loop."""
        for loop in self._loops:
            await loop.start()

    async def stop(self) -> None:
        """Stop each loop, the last started first."""
        for loop in reversed(self._loops):
            await loop.stop()


LegacyLoopFactory = Callable[[ControllerSettings, ModelStore], BackgroundLoop]
"""What serves the legacy v1alpha1 kinds (ModelDeployment, ModelCache), given the store."""
GroupLoopFactory = Callable[
    [ControllerSettings, ModelStore, GPUGroupWiring, Callable[[str], object]], BackgroundLoop
]
"""What feeds v1alpha1 GPUGroups to the arbiter and writes their status (given the store,
what the arbiter shares, and how to reconcile a Model)."""


@dataclass(frozen=True, slots=True)
class RuntimePlugin:
    """How one runtime is built, with the steps and the Model source that go with it."""

    runtime: RuntimeFactory
    prestart: PreStartFactory
    sources: Callable[[str], SourceResolution]
    models: ModelSource
    inventory: InventoryFactory
    """Where detectGPU learns the fleet's accelerators."""
    catalogs: CatalogSourcesFactory
    """Where ModelCatalogs read registry Secrets and learn of changes."""
    adapters: AdapterFeedFactory
    """Where LoRAAdapter changes applied behind the admin API's back come from."""
    legacy: LegacyLoopFactory
    """What serves v1alpha1 ModelDeployments and ModelCaches (only the apiserver holds them)."""
    adapter_cache: AdapterCacheFactory
    """Where HuggingFace and OCI LoRAAdapters are fetched for the engines."""
    adapter_roots: AdapterRootsFactory
    """The directories engines may load LoRAAdapters from (the checks and ``--lora-root``)."""
    gpugroups: GroupLoopFactory = lambda settings, store, wiring, requeue: Loops()
    """What serves v1alpha1 GPUGroups (none without an apiserver: the SQL store has no
    GPUGroup kind)."""
    events: EventsFactory = lambda settings, store: LogEvents()
    """Where Events on Models go (the log without an apiserver)."""


def _local(settings: ControllerSettings, listener: ReplicaListener) -> Runtime:
    from flexinfer_controller.runtime.local import LocalRuntime

    return LocalRuntime.from_settings(settings, listener)


def _local_prestart(settings: ControllerSettings) -> PreStart:
    """spec.quantize's conversion, then the flash loader's tmpfs copy of what it made."""
    from flexinfer_controller.flashload.prestart import FlashLoadPreStart
    from flexinfer_controller.quantize.prestart import QuantizePreStart

    quantized = QuantizePreStart(settings.data_dir / "quantized")
    return PreStartChain([quantized, FlashLoadPreStart(settings.flash_loader)])


def _declared(settings: ControllerSettings) -> GPUInventory:
    host = socket.gethostname().split(".")[0] or "localhost"
    nodes: list[NodeGPU] = []
    used: dict[tuple[str, str], int] = {}
    for gpu in settings.gpus:
        node = gpu.node or host
        # Entries of one node and vendor number their GPUs on, in the order declared.
        first = used.get((node, gpu.vendor), 0)
        used[(node, gpu.vendor)] = first + gpu.count
        labels = declared_labels(gpu.vendor, gpu.count, gpu.arch, gpu.vram)
        nodes.append(
            NodeGPU(
                node=node,
                vendor=gpu.vendor,
                count=gpu.count,
                arch=gpu.arch,
                vram_mb=parse_vram_mb(gpu.vram) if gpu.vram else None,
                indices=tuple(range(first, first + gpu.count)),
                labels=labels,
            )
        )
    return DeclaredInventory(nodes)


def _unknown_fleet(settings: ControllerSettings) -> GPUInventory:
    # The nodes' flexinfer.ai/gpu.* labels are not watched yet: kube-scheduler and the
    # scheduler extender place the pods, and detectGPU only checks the backend's vendor.
    return UnknownInventory()


@contextlib.asynccontextmanager
async def _sql_models(settings: ControllerSettings) -> AsyncIterator[tuple[ModelStore, ModelFeed]]:
    store = create_store(settings.store)
    try:
        await store.open()  # a store that cannot serve fails the start
        yield store, NoFeed()
    finally:
        await store.close()


def _local_catalogs(settings: ControllerSettings, store: ModelStore) -> CatalogSources:
    # The SQL store's writers (the admin API) queue catalog syncs themselves.
    return CatalogSources(DirectorySecrets(settings.catalog.secrets_dir))


def _kube_catalogs(settings: ControllerSettings, store: ModelStore) -> CatalogSources:
    from flexinfer_controller.adapters.kube.catalogs import ApiServerSecrets, CatalogInformerFeed
    from flexinfer_controller.adapters.kube.store import KubernetesModelStore

    if not isinstance(store, KubernetesModelStore):  # a test's SQL store under this runtime
        return _local_catalogs(settings, store)
    feed = CatalogInformerFeed(store, settings.kubernetes.watched())
    return CatalogSources(ApiServerSecrets(store.client), feed)


def _no_adapter_feed(settings: ControllerSettings, store: ModelStore) -> AdapterFeed:
    return NoAdapterFeed()  # the SQL store's only writer is the admin API


def _kube_adapters(settings: ControllerSettings, store: ModelStore) -> AdapterFeed:
    from flexinfer_controller.adapters.kube.loras import AdapterInformerFeed
    from flexinfer_controller.adapters.kube.store import KubernetesModelStore

    if not isinstance(store, KubernetesModelStore):  # a test's SQL store under this runtime
        return NoAdapterFeed()
    return AdapterInformerFeed(store, settings.kubernetes.watched())


def _registry_adapters(settings: ControllerSettings, notify: Notify) -> AdapterCache:
    from flexinfer_controller.adapters.registry.factory import create_adapter_cache

    return create_adapter_cache(settings, notify)


def _local_roots(settings: ControllerSettings) -> AdapterRoots:
    """The operator's roots and the adapter cache; engines share this filesystem."""
    from flexinfer_controller.adapters.registry.factory import adapter_cache_dir

    cache = adapter_cache_dir(settings)
    own = [cache] if cache is not None else []
    return AdapterRoots.of(settings.lora_roots, own, follow_links=True)


def _pod_roots(settings: ControllerSettings) -> AdapterRoots:
    from flexinfer_controller.runtime.kubernetes.lora import adapter_roots

    return adapter_roots(settings)


def _job_adapters(settings: ControllerSettings, notify: Notify) -> AdapterCache:
    from flexinfer_controller.runtime.kubernetes.factory import kubernetes_adapter_cache

    return kubernetes_adapter_cache(settings, notify)


def _no_legacy(settings: ControllerSettings, store: ModelStore) -> BackgroundLoop:
    return Loops()  # the legacy kinds are custom resources: there are none without a cluster


def _kube_legacy(settings: ControllerSettings, store: ModelStore) -> BackgroundLoop:
    from flexinfer_controller.adapters.kube.deployments import deployment_bridge
    from flexinfer_controller.adapters.kube.modelcaches import modelcache_controller
    from flexinfer_controller.adapters.kube.store import KubernetesModelStore

    if not isinstance(store, KubernetesModelStore):  # a test's SQL store under this runtime
        return Loops()
    kube = settings.kubernetes
    # Both follow Models or ModelCaches: through the store's informers, not ones of their own.
    bridge = deployment_bridge(store.client, kube.watched(), informers=store.informers)
    return Loops(bridge, modelcache_controller(store.client, kube, informers=store.informers))


def _kube_gpugroups(
    settings: ControllerSettings,
    store: ModelStore,
    wiring: GPUGroupWiring,
    requeue: Callable[[str], object],
) -> BackgroundLoop:
    from flexinfer_controller.adapters.kube.gpugroups import gpugroup_loop
    from flexinfer_controller.adapters.kube.store import KubernetesModelStore

    if not isinstance(store, KubernetesModelStore):  # a test's SQL store under this runtime
        return Loops()
    namespaces = settings.kubernetes.watched()
    loop = gpugroup_loop(store.client, namespaces, store.informers, store, wiring, requeue)
    return loop if loop is not None else Loops()


def _kube_events(settings: ControllerSettings, store: ModelStore) -> ModelEvents:
    from flexinfer_controller.adapters.kube.events import KubeEvents
    from flexinfer_controller.adapters.kube.store import KubernetesModelStore

    if not isinstance(store, KubernetesModelStore):  # a test's SQL store under this runtime
        return LogEvents()
    return KubeEvents(store.client, store, settings.instance_id)


def _kubernetes(settings: ControllerSettings, listener: ReplicaListener) -> Runtime:
    from flexinfer_controller.runtime.kubernetes.factory import kubernetes_runtime

    return kubernetes_runtime(settings, listener)


def _no_prestart(settings: ControllerSettings) -> PreStart:
    return NoPreStart()  # the flash loader is the Deployment's init container


def _cluster_source(source: str) -> SourceResolution:
    from flexinfer_controller.runtime.kubernetes.launch import cluster_source

    return cluster_source(source)


def _kube_models(
    settings: ControllerSettings,
) -> AbstractAsyncContextManager[tuple[ModelStore, ModelFeed]]:
    from flexinfer_controller.runtime.kubernetes.factory import kubernetes_models

    return kubernetes_models(settings)


def _plugins() -> dict[str, RuntimePlugin]:
    return {
        "local": RuntimePlugin(
            _local,
            _local_prestart,
            resolve_source,
            _sql_models,
            _declared,
            _local_catalogs,
            _no_adapter_feed,
            _no_legacy,
            _registry_adapters,
            _local_roots,
        ),
        "kubernetes": RuntimePlugin(
            _kubernetes,
            _no_prestart,
            _cluster_source,
            _kube_models,
            _unknown_fleet,
            _kube_catalogs,
            _kube_adapters,
            _kube_legacy,
            _job_adapters,
            _pod_roots,
            _kube_gpugroups,
            _kube_events,
        ),
    }


def runtime_names() -> list[str]:
    """Names ``ControllerSettings.runtime`` accepts."""
    return sorted(_plugins())


def runtime_plugin(settings: ControllerSettings) -> RuntimePlugin:
    """The plugin ``settings.runtime`` names; ConfigError for an unknown name."""
    try:
        return _plugins()[settings.runtime]
    except KeyError:
        known = ", ".join(runtime_names())
        raise ConfigError(f"runtime {settings.runtime!r} is not one of: {known}") from None


def create_runtime(settings: ControllerSettings, listener: ReplicaListener) -> Runtime:
    """The runtime that ``settings.runtime`` names."""
    return runtime_plugin(settings).runtime(settings, listener)


def create_prestart(settings: ControllerSettings) -> PreStart:
    """The pre-start step of the runtime that ``settings.runtime`` names."""
    return runtime_plugin(settings).prestart(settings)


def create_inventory(settings: ControllerSettings) -> GPUInventory:
    """The GPU inventory of the runtime that ``settings.runtime`` names."""
    return runtime_plugin(settings).inventory(settings)


def open_models(
    settings: ControllerSettings,
) -> AbstractAsyncContextManager[tuple[ModelStore, ModelFeed]]:
    """The Model store and feed of the runtime that ``settings.runtime`` names."""
    return runtime_plugin(settings).models(settings)
