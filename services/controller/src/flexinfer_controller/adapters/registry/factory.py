"""Build the caches the settings ask for (Models, LoRAAdapters): through the registry, or none."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from flexinfer_controller.adapters.registry.settings import RegistryClientSettings
from flexinfer_controller.core.cache import ModelCache, NoRegistryCache, Notify
from flexinfer_controller.core.lora.sources import AdapterCache, NoAdapterCache
from flexinfer_controller.settings import ControllerSettings

if TYPE_CHECKING:
    from flexinfer_controller.adapters.registry.client import RegistryClient


def _client(registry: RegistryClientSettings, address: str) -> RegistryClient:
    # Imported here: gRPC is loaded only by a controller that has a registry.
    from flexinfer_controller.adapters.registry.client import RegistryClient

    token = registry.auth_token.get_secret_value() if registry.auth_token else None
    return RegistryClient(
        address,
        token=token,
        call_timeout_s=registry.call_timeout_s,
        stream_timeout_s=registry.download_timeout_s,
    )


def _cache_root(settings: ControllerSettings) -> Path:
    return (settings.registry.cache_dir or settings.data_dir / "models-cache").expanduser()


def create_model_cache(settings: ControllerSettings, notify: Notify) -> ModelCache:
    """The registry-backed cache when ``settings.registry.address`` is set."""
    registry = settings.registry
    if not registry.address:
        return NoRegistryCache()
    from flexinfer_controller.adapters.registry.cache import RegistryModelCache

    client = _client(registry, registry.address)
    return RegistryModelCache(client, registry, _cache_root(settings), notify)


def adapter_cache_dir(settings: ControllerSettings) -> Path | None:
    """Where fetched LoRAAdapters are written (``<cache dir>/lora-adapters``), absolute as the
    engines are given adapter paths and roots; None without a registry (nothing is fetched)."""
    if not settings.registry.address:
        return None
    return _cache_root(settings).absolute() / "lora-adapters"


def create_adapter_cache(settings: ControllerSettings, notify: Notify) -> AdapterCache:
    """Remote LoRAAdapter sources fetched through the registry (the one Models use) into
    ``<cache dir>/lora-adapters``; without a registry they wait, naming the setting."""
    registry = settings.registry
    directory = adapter_cache_dir(settings)
    if directory is None or not registry.address:
        return NoAdapterCache()
    from flexinfer_controller.adapters.registry.cache import RegistryModelCache
    from flexinfer_controller.adapters.registry.lora import RegistryAdapterCache

    client = _client(registry, registry.address)
    return RegistryAdapterCache(
        lambda tell: RegistryModelCache(client, registry, directory, tell), notify
    )
