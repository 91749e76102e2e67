"""The registry's Prometheus metrics, registered on the app's own registry."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge


class RegistryMetrics:
    """Counters and gauges the core updates; a private registry when none is given."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        reg = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.downloads_started = Counter(
            "flexinfer_registry_downloads_started", "Downloads started (claims won)", registry=reg
        )
        self.downloads_completed = Counter(
            "flexinfer_registry_downloads_completed",
            "Downloads installed in the cache",
            registry=reg,
        )
        self.downloads_failed = Counter(
            "flexinfer_registry_downloads_failed", "Downloads that ended in ERROR", registry=reg
        )
        self.bytes_downloaded = Counter(
            "flexinfer_registry_downloaded_bytes", "Bytes of models downloaded", registry=reg
        )
        self.bytes_streamed = Counter(
            "flexinfer_registry_streamed_bytes", "Bytes sent by StreamModelFiles", registry=reg
        )
        self.cache_hits = Counter(
            "flexinfer_registry_cache_hits",
            "EnsureModelDownloaded found the model cached",
            registry=reg,
        )
        self.cache_misses = Counter(
            "flexinfer_registry_cache_misses", "EnsureModelDownloaded had to download", registry=reg
        )
        self.evictions = Counter(
            "flexinfer_registry_evictions", "Models evicted from the cache", registry=reg
        )
        self.active_sources = Gauge(
            "flexinfer_registry_active_sources", "P2P source workers READY and fresh", registry=reg
        )
        self.sources = Gauge(
            "flexinfer_registry_sources",
            "P2P source workers by status, as the reaper last counted them",
            ["status"],
            registry=reg,
        )

    def set_sources(self, counts: Mapping[str, int]) -> None:
        """The sources gauge from one reaper pass's counts by status."""
        for status, count in counts.items():
            self.sources.labels(status).set(count)
