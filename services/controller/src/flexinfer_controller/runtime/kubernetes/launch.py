"""The kubernetes runtime's side of the reconcile's launch and source steps.

The reconcile core renders a LaunchSpec before it starts a replica, which is where a
Model that cannot run is told so (InvalidSpecError, UnsupportedBackendError). On
Kubernetes the same check is the render of the Model's objects; the LaunchSpec then only
describes the engine container (the runtime renders the Deployment from the Model).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from flexinfer_common.api import Model
from flexinfer_controller.backends.base import Backend, BackendRegistry
from flexinfer_controller.backends.launch import LaunchContext, LaunchSpec
from flexinfer_controller.core.sources import SourceResolution, SourceState
from flexinfer_controller.runtime.kubernetes.cache import PROVIDERS
from flexinfer_controller.runtime.kubernetes.context import build_context
from flexinfer_controller.runtime.kubernetes.options import GPUPlacement, RenderOptions


def launch_on_kubernetes(
    backend: Backend, model: Model, model_dir: Path | None, ctx: LaunchContext
) -> LaunchSpec:
    """The engine container of ``model`` as a LaunchSpec (``model_dir`` is the cluster's)."""
    backends = BackendRegistry({backend.name: lambda: backend})
    options = RenderOptions(
        environ=ctx.environ, gpu=GPUPlacement(ctx.vendor, ctx.arch), lora_roots=ctx.lora_roots
    )
    engine = build_context(model, backends, options).engine
    return LaunchSpec(
        argv=(*engine.command, *engine.args),
        served_name=engine.served_name,
        env=dict(engine.env),
        gpu_vendor=ctx.vendor,
        gpu_arch=ctx.arch,
    )


def cluster_source(source: str) -> SourceResolution:
    """A volume is ready as mounted; a fetched source waits for the cache gate (its Jobs)."""
    if urlsplit(source).scheme.lower() in PROVIDERS:
        return SourceResolution(SourceState.REMOTE, reason="CacheNotReady")
    return SourceResolution(
        SourceState.READY,
        reason="Cached",
        message=f"{source} is mounted from the cluster's model cache",
    )
