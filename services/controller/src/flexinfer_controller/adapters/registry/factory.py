"""Build the ModelCache the settings ask for: through the registry, or none."""

from __future__ import annotations

from flexinfer_controller.core.cache import ModelCache, NoRegistryCache, Notify
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
