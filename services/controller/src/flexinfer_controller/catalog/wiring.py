"""Build the catalog loop from settings and the runtime's sources (called by create_app)."""

from __future__ import annotations

from dataclasses import dataclass, field

from flexinfer_common.store import ModelStore
from flexinfer_controller.catalog.client import ClientOptions
from flexinfer_controller.catalog.controller import CatalogController
from flexinfer_controller.catalog.reconcile import CatalogReconciler, RetryPolicy
from flexinfer_controller.catalog.registries import SyncOptions
from flexinfer_controller.catalog.secrets import SecretSource
from flexinfer_controller.catalog.settings import CatalogSettings
from flexinfer_controller.core.feed import ModelFeed, NoFeed
from flexinfer_controller.core.queue import WorkQueue


@dataclass(frozen=True)
class CatalogSources:
    """Where a runtime's catalogs get their Secrets and their change notifications."""

    secrets: SecretSource
    feed: ModelFeed = field(default_factory=NoFeed)


def catalog_controller(
    settings: CatalogSettings,
    store: ModelStore,
    sources: CatalogSources,
    client: ClientOptions | None = None,
) -> CatalogController:
    """The catalog loop on ``store``; ``client`` overrides the registry client's options."""
    options = SyncOptions(
        client=client or ClientOptions(timeout_s=settings.request_timeout_s),
        timeout_s=settings.registry_timeout_s,
        concurrency=settings.request_concurrency,
    )
    retry = RetryPolicy(settings.retry_initial_s, settings.retry_max_s)

    def reconciler(queue: WorkQueue) -> CatalogReconciler:
        return CatalogReconciler(store, sources.secrets, queue.add_after, options, retry)

    return CatalogController(
        store,
        reconciler,
        feed=sources.feed,
        workers=settings.workers,
        resync_interval_s=settings.resync_interval_s,
    )
