"""``core.lora.sources.AdapterCache`` through the registry: the Model cache's fetch, keyed
per adapter.

An adapter's ``hf://`` or ``oci://`` source is fetched exactly as a Model's is (the
registry downloads it, then streams the files here), into ``<root>/<namespace>_<name>``
of its own root; the engine loads it from there (local engines share this disk).
"""

from __future__ import annotations

from collections.abc import Callable

from flexinfer_common.api import LoRAAdapter, Model
from flexinfer_controller.adapters.registry.cache import RegistryModelCache
from flexinfer_controller.core.cache import CacheState, Notify


class RegistryAdapterCache:
    """One background fetch per adapter; a moved fetch re-queues the adapter's base Model."""

    def __init__(self, cache: Callable[[Notify], RegistryModelCache], notify: Notify) -> None:
        self._notify = notify
        self._cache = cache(self._moved)
        self._models: dict[str, str] = {}
        """Adapter key -> its base Model's key as last asked (what a moved fetch re-queues)."""

    def _moved(self, key: str) -> None:
        model = self._models.get(key)
        if model is not None:
            self._notify(model)

    def ensure(self, adapter: LoRAAdapter, source: str, model: Model) -> CacheState:
        """The state of ``source`` for ``adapter``; starts (or keeps) its fetch."""
        self._models[adapter.key] = adapter.model_key
        generation = adapter.metadata.generation or 1
        return self._cache.ensure_source(adapter.key, _dirname(adapter), source, generation)

    async def release(self, adapter: LoRAAdapter, model: Model | None) -> None:
        """Stop the adapter's fetch and remove its files."""
        self._models.pop(adapter.key, None)
        await self._cache.release_source(adapter.key, _dirname(adapter))

    async def close(self) -> None:
        """Stop every fetch and close the registry channel."""
        await self._cache.close()


def _dirname(adapter: LoRAAdapter) -> str:
    return f"{adapter.metadata.namespace}_{adapter.metadata.name}"
