"""DirectOnly downloads for ``flexinfer mx``: the providers, straight into a local cache.

OCI registries are reached as the registry server reaches them, by its own settings:
credentials from the docker config.json that ``FLEXINFER_REGISTRY_OCI_AUTH_FILE`` names
(a prefetch Job mounts a ModelCache's ``ociRegistrySecretRef`` there), plain http only to
the hosts ``FLEXINFER_REGISTRY_OCI_INSECURE_REGISTRIES`` lists.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flexinfer_common.errors import ConfigError
from flexinfer_registry.adapters.providers import builtin_providers
from flexinfer_registry.adapters.providers.oci_auth import AUTH_SETTING, INSECURE_SETTING
from flexinfer_registry.client import mx_fetch
from flexinfer_registry.core.providers.base import ProgressCallback, ProviderConfig
from flexinfer_registry.core.providers.registry import ProviderRegistry
from flexinfer_registry.settings import host_list


def cache_dir(flag: str | None, env: Mapping[str, str] | None = None) -> Path:
    """--cache-dir, else MODEL_EXPRESS_CACHE_DIRECTORY, else ~/.cache/flexinfer/mx."""
    env = os.environ if env is None else env
    raw = flag or env.get("MODEL_EXPRESS_CACHE_DIRECTORY")
    return Path(raw) if raw else Path.home() / ".cache" / "flexinfer" / "mx"


def local_dir(root: Path, provider: str, model_name: str) -> Path:
    """Where a directly downloaded model lives: ``<root>/<provider>/<name as a safe path>``."""
    plain = model_name.split("://", 1)[-1]
    parts = [p for p in plain.replace(":", "/").split("/") if p not in ("", ".", "..")]
    return root.joinpath(provider, *parts) if parts else root / provider / "_"


def provider_config(env: Mapping[str, str] | None = None) -> ProviderConfig:
    """The providers' settings of a direct download: any readable directory is a file
    source, and the OCI settings are the registry server's own variables."""
    env = os.environ if env is None else env
    # The user's own process reading the user's own files: no privilege boundary to guard,
    # so any directory they can read is a file source (the server allows only its roots).
    auth = env.get(AUTH_SETTING)
    try:
        hosts = host_list(env.get(INSECURE_SETTING, ""))
    except ValueError:
        hosts = None
    if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
        raise ConfigError(f"{INSECURE_SETTING} must be a JSON list or a comma-separated list")
    return ProviderConfig(
        file_roots=(Path("/"),),
        oci_insecure_registries=frozenset(h.lower() for h in hosts),
        oci_auth_file=Path(auth) if auth else None,
    )


def _registry() -> ProviderRegistry:
    return builtin_providers(provider_config())


def target_dir(root: Path, model_name: str, provider_enum: int) -> Path:
    """The directory a download of ``model_name`` leaves in ``root``, by either path."""
    return local_dir(root, _registry().name_for(model_name, provider_enum), model_name)


def download_direct(
    model_name: str,
    provider_enum: int,
    revision: str | None,
    *,
    ignore_weights: bool,
    root: Path,
    progress: ProgressCallback | None = None,
) -> dict[str, Any]:
    """Download with the matching provider into a temp dir, then rename it into place."""
    registry = _registry()
    name = registry.name_for(model_name, provider_enum)
    target = local_dir(root, name, model_name)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".partial-", dir=target.parent))
    try:
        result = asyncio.run(
            registry.get(name).download(
                model_name, revision, staging, ignore_weights=ignore_weights, progress=progress
            )
        )
        files = [(f.path, f.size) for f in result.files]
        mx_fetch.install(staging, target, mx_fetch.marker(model_name, revision, files))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {
        "model_name": model_name,
        "status": "DOWNLOADED",
        "provider": name,
        "path": str(target),
        "resolved_revision": result.resolved_revision,
        "files": len(result.files),
        "total_size": result.total_size,
    }
