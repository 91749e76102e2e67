"""Settings of the controller on Kubernetes (``FLEXINFER_KUBERNETES_*``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

CONTROLLER_IMAGE = "flexinfer/controller"
"""Has the flash loader (``python -m flexinfer_controller.flashload``)."""
REGISTRY_IMAGE = "flexinfer/registry"
"""Has the registry client (``python -m flexinfer_registry.client.mx_cli``)."""
REGISTRY_ADDRESS = "flexinfer-registry.flexinfer.svc:8001"
"""The registry's gRPC Service (k8s/base/registry.yaml)."""


class KubernetesSettings(BaseSettings):
    """How the ``kubernetes`` runtime reaches the apiserver and what it watches."""

    model_config = SettingsConfigDict(env_prefix="FLEXINFER_KUBERNETES_", extra="ignore")

    host: str | None = None
    """The apiserver's URL. Unset: the pod's service account when running in a cluster
    (the usual case), else ``kubeconfig``."""

    kubeconfig: Path | None = None
    """A kubeconfig file, used outside a cluster (unset: $KUBECONFIG, then ~/.kube/config)."""

    namespaces: list[str] = Field(default_factory=list)
    """Namespaces whose Models (and engine pods) are watched, as a JSON list; empty: every
    namespace, which the ClusterRole in k8s/base allows. One watch per namespace listed."""

    watch_timeout_s: int = Field(default=300, ge=1, le=3600)
    """Seconds a watch request lasts before it is resumed (the apiserver's own default)."""

    job_poll_s: float = Field(default=5.0, gt=0, le=300)
    """Seconds between reads of a running prefetch/quantize Job (Jobs are not watched)."""

    job_retry_initial_s: float = Field(default=30.0, gt=0, le=3600)
    """Seconds from a Model's failed prefetch/quantize Job to its first re-run (the Job is
    deleted and created again; the Model stays Failed meanwhile). 30 s: the Job has already
    retried its pod ``backoffLimit`` (3) times under Kubernetes' own pod backoff (10, 20,
    40 s), so what is left is an outage of a minute or more; sooner would mostly fail again."""

    job_retry_max_s: float = Field(default=1800.0, gt=0, le=86400)
    """Seconds the delay doubles up to, per further failure of the same spec's Job. 30 min:
    a registry or bucket down for hours costs two pod starts an hour, and its recovery is
    still picked up within half an hour without anyone changing the spec."""

    controller_image: str = CONTROLLER_IMAGE
    """Image of the flash loader init container and the cleanup Job."""

    registry_image: str = REGISTRY_IMAGE
    """Image of the prefetch Job (the registry client)."""

    registry_address: str = REGISTRY_ADDRESS
    """The registry's gRPC address, as the prefetch Job dials it."""

    registry_p2p_token_secret: str | None = Field(
        default=None, pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
    )
    """A Secret, in each Model's namespace, holding the registry's P2P token: reference
    engine pods read it into ``FLEXINFER_ENGINE_REGISTRY_TOKEN`` through ``secretKeyRef``
    (the kubelet reads it; the controller never does, and the pod spec holds only the
    name). Unset: engines send no token, right for a registry without tokens."""

    registry_p2p_token_secret_key: str = Field(default="token", pattern=r"^[-._a-zA-Z0-9]{1,253}$")
    """The key of that Secret holding the token: ``token``, as in the admin token Secret
    (``kubectl create secret generic ... --from-literal=token=...``)."""

    registry_fetch_token_secret: str | None = Field(
        default=None, pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
    )
    """A Secret, in each Model's (and ModelCache's) namespace, holding the registry's fetch
    token (its ``FLEXINFER_REGISTRY_FETCH_TOKEN``, which opens only EnsureModelDownloaded,
    ListModelFiles and StreamModelFiles): the prefetch, LoRA fetch and ModelCache download
    Jobs read it through ``secretKeyRef`` into the registry client's token variable
    (FLEXINFER_REGISTRY_AUTH_TOKEN). Name a Secret holding the registry's admin token only
    for a registry older than the fetch scope: a leaked Job token would then open it all.
    Engines never get it. Unset: the Jobs send no token, right for a registry without
    tokens."""

    registry_fetch_token_secret_key: str = Field(
        default="token", pattern=r"^[-._a-zA-Z0-9]{1,253}$"
    )
    """The key of that Secret holding the token."""

    def watched(self) -> list[str | None]:
        """The namespaces to watch, None meaning all of them."""
        return list(self.namespaces) or [None]
