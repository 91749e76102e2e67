"""Build the caches the settings ask for (Models, LoRAAdapters): through the registry, or none."""

from __future__ import annotations

from pathlib import Path

from flexinfer_controller.core.cache import ModelCache, NoRegistryCache, Notify
from flexinfer_controller.core.lora.sources import AdapterCache, NoAdapterCache
from flexinfer_controller.settings import ControllerSettings


def create_model_cache(settings: ControllerSettings, notify: Notify) -> ModelCache:
    """The registry-backed cache when ``settings.registry.address`` is set."""
    registry = settings.registry
    if not registry.address:
        return NoRegistryCache()
    from flexinfer_controller.adapters.registry.cache import RegistryModelCache
    from flexinfer_controller.adapters.registry.client import RegistryClient

    token = registry.auth_token.get_secret_value() if registry.auth_token else None
    client = RegistryClient(
        registry.address,
        token=token,
        call_timeout_s=registry.call_timeout_s,
        stream_timeout_s=registry.download_timeout_s,
    )
    root = registry.cache_dir or settings.data_dir / "models-cache"
    return RegistryModelCache(client, registry, root.expanduser(), notify)


def adapter_cache_dir(settings: ControllerSettings) -> Path | None:
    """Where fetched LoRAAdapters are written (``<cache dir>/lora-adapters``), absolute as the
    engines are given adapter paths and roots; None without a registry (nothing is fetched)."""
    registry = settings.registry
    if not registry.address:
        return None
    root = (registry.cache_dir or settings.data_dir / "models-cache").expanduser().absolute()
    return root / "lora-adapters"


def create_adapter_cache(settings: ControllerSettings, notify: Notify) -> AdapterCache:
    """Remote LoRAAdapter sources fetched through the registry (the one Models use) into
    ``<cache dir>/lora-adapters``; without a registry they wait, naming the setting."""
    registry = settings.registry
    directory = adapter_cache_dir(settings)
    if directory is None or not registry.address:
        return NoAdapterCache()
    from flexinfer_controller.adapters.registry.cache import RegistryModelCache
    from flexinfer_controller.adapters.registry.client import RegistryClient
    from flexinfer_controller.adapters.registry.lora import RegistryAdapterCache

    token = registry.auth_token.get_secret_value() if registry.auth_token else None
    client = RegistryClient(
        registry.address,
        token=token,
        call_timeout_s=registry.call_timeout_s,
        stream_timeout_s=registry.download_timeout_s,
    )
    return RegistryAdapterCache(
        lambda tell: RegistryModelCache(client, registry, directory, tell), notify
    )
