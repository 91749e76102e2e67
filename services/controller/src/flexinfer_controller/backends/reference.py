"""The reference engine (``python -m flexinfer_engine serve``): FlexInfer's own server.

It has no config keys (spec.config is ignored): everything it needs is the model
directory and the served name. Locally it reports readiness on a file descriptor.
It serves LoRA adapters through vLLM's routes (POST /v1/load_lora_adapter and
/v1/unload_lora_adapter); with bound LoRAAdapters it gets ``--max-loras N`` as vLLM does.
It refuses adapter paths outside its roots: it gets one ``--lora-root`` per directory the
controller loads adapters from (its adapter cache, the operator's roots), always, so an
adapter created later loads without a restart.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import ClassVar

from flexinfer_common.backends import backend_facts
from flexinfer_controller.backends.base import (
    AdapterEndpoints,
    Backend,
    EngineSpec,
    RenderRequest,
    SecretKeyRef,
    SleepEndpoints,
)
from flexinfer_controller.backends.reference_vram import reference_vram_mb
from flexinfer_controller.backends.render import (
    Config,
    ImageRule,
    bind,
    http_probe,
    http_startup_probe,
    model_arg,
    require_vendor,
    resolve_image,
    served_name,
)

IMAGES = (ImageRule("DEFAULT_FLEXINFER_ENGINE_IMAGE", "flexinfer/engine:latest"),)
COMMAND = ("python", "-m", "flexinfer_engine", "serve")


class ReferenceBackend(Backend):
    """FlexInfer's PyTorch engine: any vendor PyTorch runs on, readiness GET /readyz."""

    facts = backend_facts("reference")
    vendors: ClassVar[frozenset[str]] = frozenset({"nvidia", "amd", "cpu"})
    sleep: ClassVar[SleepEndpoints | None] = SleepEndpoints("/sleep", "/wake_up")
    lora: ClassVar[AdapterEndpoints | None] = AdapterEndpoints(
        "/v1/load_lora_adapter", "/v1/unload_lora_adapter"
    )
    metrics_path: ClassVar[str | None] = "/metrics"
    startup_timeout_s: ClassVar[float] = 300.0

    def vram_estimate_mb(self, model_dir: Path) -> int | None:
        """Its weights plus the KV cache of its generations (see ``reference_vram``)."""
        return reference_vram_mb(model_dir)

    def render(self, request: RenderRequest) -> EngineSpec:
        """``python -m flexinfer_engine serve --model-dir D --served-model-name N``."""
        require_vendor(self.name, self.vendors, request)
        host, port = bind(request, self.port)
        name = served_name(request.model)
        args: tuple[str, ...] = (
            "--model-dir", model_arg(request),
            "--served-model-name", name,
            "--host", host,
            "--port", str(port),
        )  # fmt: skip
        args += _lora_limits(request)
        for root in request.lora_roots:
            args += ("--lora-root", root)  # absolute, no control characters (settings)
        return EngineSpec(
            backend=self.name,
            image=resolve_image(IMAGES, request),
            command=COMMAND,
            args=args,
            env=peer_env(request),
            field_env=PEER_FIELD_ENV if request.registry else {},
            secret_env=peer_secret_env(request),
            host=host,
            port=port,
            served_name=name,
            readiness=http_probe("/readyz", port, 0, 5, 3),
            startup=http_startup_probe("/readyz", port, self.startup_timeout_s),
            startup_timeout_s=self.startup_timeout_s,
            model_mount=request.model_location,
        )


REGISTRY_TOKEN_ENV = "FLEXINFER_ENGINE_REGISTRY_TOKEN"
"""The engine's setting for the registry's P2P token."""

PEER_FIELD_ENV = {"FLEXINFER_TRANSFER_SOURCE_ADVERTISE_HOST": "status.podIP"}
"""In a pod, peers reach this replica's WorkerService and NIXL agent at the pod IP."""


def peer_env(request: RenderRequest) -> dict[str, str]:
    """With a registry: pull the weights from a READY replica when one is listed (files
    otherwise) and, once loaded, serve them to the next replica (publish, heartbeat)."""
    if not request.registry:
        return {}
    env = {"FLEXINFER_ENGINE_REGISTRY": request.registry, "FLEXINFER_ENGINE_P2P_SOURCE": "1"}
    if request.registry_token:
        # Explicitly: the engine inherits no TOKEN-like variable (runtime/engine_env.py), and
        # it gets the registry's P2P token, never the controller's admin token.
        env[REGISTRY_TOKEN_ENV] = request.registry_token
    if _loopback(request.host):
        # A loopback engine (the local runtime: every peer on this host) keeps its
        # WorkerService and UCX's listeners on loopback too.
        env["FLEXINFER_TRANSFER_SOURCE_BIND_HOST"] = request.host
        env["UCX_NET_DEVICES"] = "lo"
    return env


def peer_secret_env(request: RenderRequest) -> dict[str, SecretKeyRef]:
    """With a registry and a Secret holding its P2P token: the token, read from the Secret
    by the kubelet (a pod spec never carries it)."""
    if not request.registry or request.registry_token_secret is None:
        return {}
    return {REGISTRY_TOKEN_ENV: request.registry_token_secret}


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _lora_limits(request: RenderRequest) -> tuple[str, ...]:
    """``--max-loras``/``--max-lora-rank`` from ``spec.config.maxLoras``/``maxLoraRank``, the
    keys vLLM's Models use; without them the engine keeps vLLM's defaults (1 and 16)."""
    config = Config(request.model.spec.config)
    limits: tuple[str, ...] = ()
    count = config.integer("maxLoras") or request.lora_adapters
    if count > 0:
        limits += ("--max-loras", str(count))
    rank = config.integer("maxLoraRank")
    if rank > 0:
        limits += ("--max-lora-rank", str(rank))
    return limits
