"""How the controller reaches the registry (``FLEXINFER_CONTROLLER_REGISTRY_*``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class RegistryClientSettings(BaseSettings):
    """The registry's gRPC API, which fetches hf://, s3://, gs:// and ngc:// sources."""

    model_config = SettingsConfigDict(env_prefix="FLEXINFER_CONTROLLER_REGISTRY_", extra="ignore")

    address: str | None = None
    """The registry's gRPC ``host:port`` (``flexinfer up`` sets its embedded one). None:
    remote sources stay Pending with reason RegistryNotConfigured."""

    auth_token: SecretStr | None = None
    """Sent as ``authorization: Bearer`` when the registry was started with a token."""

    p2p_token: SecretStr | None = None
    """The registry's P2P token (its ``FLEXINFER_REGISTRY_P2P_TOKEN``), handed to the
    reference engines this controller starts locally (``FLEXINFER_ENGINE_REGISTRY_TOKEN``)
    so they can warm-start from a peer and publish themselves. Engines never get
    ``auth_token``. On Kubernetes, engines read it from a Secret instead
    (``FLEXINFER_KUBERNETES_REGISTRY_P2P_TOKEN_SECRET``)."""

    cache_dir: Path | None = None
    """Where fetched models are written (``<dir>/<namespace>_<name>/``); None: the
    controller's ``data_dir/models-cache``. The controller writes nowhere else."""

    call_timeout_s: float = Field(default=30.0, gt=0)
    """Seconds for a unary call (ListModelFiles): it reads the registry's store only, so
    30 s means the registry is stuck, not busy."""

    download_timeout_s: float = Field(default=86400.0, gt=0)
    """Seconds EnsureModelDownloaded and StreamModelFiles may take in all: a day, because
    hundreds of GB over a slow link take hours; a stuck stream is caught by
    ``stall_timeout_s`` long before."""

    stall_timeout_s: float = Field(default=120.0, gt=0)
    """Seconds without any message on a download stream before it is abandoned and retried:
    the registry sends a status at least every heartbeat (5 s by default) while it
    downloads, so two minutes of silence is a lost connection."""

    retry_initial_s: float = Field(default=1.0, gt=0)
    """First wait after a transient failure (registry down, source unreachable); doubles."""

    retry_max_s: float = Field(default=60.0, gt=0)
    """Longest wait between retries: a registry that comes back is used within a minute."""

    chunk_size: int | None = Field(default=None, ge=4096, le=16 * 1024 * 1024)
    """Bytes per StreamModelFiles chunk; None: the registry's default (1 MiB)."""
