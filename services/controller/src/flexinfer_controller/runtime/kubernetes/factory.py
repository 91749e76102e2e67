"""Build the kubernetes runtime and its Model source from the controller settings."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator

from flexinfer_common.kube.client import KubeClient
from flexinfer_common.store import ModelStore
from flexinfer_controller.adapters.kube.feed import InformerFeed
from flexinfer_controller.adapters.kube.shared import SharedInformers
from flexinfer_controller.adapters.kube.store import KubernetesModelStore
from flexinfer_controller.adapters.kube.workloads import Workloads
from flexinfer_controller.backends import default_backends
from flexinfer_controller.backends.base import SecretKeyRef
from flexinfer_controller.core.cache import Notify
from flexinfer_controller.core.feed import ModelFeed
from flexinfer_controller.kube_settings import KubernetesSettings
from flexinfer_controller.runtime.base import ReplicaListener
from flexinfer_controller.runtime.kubernetes.apply import Applier
from flexinfer_controller.runtime.kubernetes.lora import JobAdapterCache, adapter_roots
from flexinfer_controller.runtime.kubernetes.options import RenderOptions
from flexinfer_controller.runtime.kubernetes.retry import RetryPolicy
from flexinfer_controller.runtime.kubernetes.runtime import KubernetesRuntime
from flexinfer_controller.settings import ControllerSettings


def connect(kube: KubernetesSettings) -> KubeClient:
    """A client as the settings say (ConfigError when no configuration is found)."""
    kubeconfig = str(kube.kubeconfig) if kube.kubeconfig is not None else None
    return KubeClient(kube.host, kubeconfig=kubeconfig)


def render_options(settings: ControllerSettings) -> RenderOptions:
    """The controller's side of every render."""
    kube = settings.kubernetes
    return RenderOptions(
        environ=dict(os.environ),  # image overrides (DEFAULT_VLLM_IMAGE...)
        controller_image=kube.controller_image,
        registry_image=kube.registry_image,
        registry_address=kube.registry_address,
        registry_token_secret=_token_secret(kube),
        registry_fetch_token_secret=_fetch_token_secret(kube),
        flash=settings.flash_loader,
        lora_roots=adapter_roots(settings).texts,
    )


def _token_secret(kube: KubernetesSettings) -> SecretKeyRef | None:
    if kube.registry_p2p_token_secret is None:
        return None
    return SecretKeyRef(kube.registry_p2p_token_secret, kube.registry_p2p_token_secret_key)


def _fetch_token_secret(kube: KubernetesSettings) -> SecretKeyRef | None:
    if kube.registry_fetch_token_secret is None:
        return None
    return SecretKeyRef(kube.registry_fetch_token_secret, kube.registry_fetch_token_secret_key)


def kubernetes_runtime(
    settings: ControllerSettings, listener: ReplicaListener
) -> KubernetesRuntime:
    """The runtime, with its own connection pool."""
    kube = settings.kubernetes
    return KubernetesRuntime(
        client=connect(kube),
        listener=listener,
        backends=default_backends(),
        options=render_options(settings),
        namespaces=kube.watched(),
        watch_timeout_s=kube.watch_timeout_s,
        job_poll_s=kube.job_poll_s,
        job_retry=RetryPolicy(kube.job_retry_initial_s, kube.job_retry_max_s),
    )


def kubernetes_adapter_cache(settings: ControllerSettings, notify: Notify) -> JobAdapterCache:
    """HuggingFace and OCI LoRAAdapters fetched by Jobs, with a connection pool of its own."""
    client = connect(settings.kubernetes)
    return JobAdapterCache(
        Applier(Workloads(client)),
        default_backends(),
        render_options(settings),
        notify,
        poll_s=settings.kubernetes.job_poll_s,
        on_close=client.close,
    )


@contextlib.asynccontextmanager
async def kubernetes_models(
    settings: ControllerSettings,
) -> AsyncIterator[tuple[ModelStore, ModelFeed]]:
    """Models as custom resources, and informers of them (shared with the legacy loops)."""
    kube = settings.kubernetes
    store = KubernetesModelStore(connect(kube), SharedInformers(kube.watch_timeout_s))
    try:
        yield store, InformerFeed(store, kube.watched())
    finally:
        await store.close()
