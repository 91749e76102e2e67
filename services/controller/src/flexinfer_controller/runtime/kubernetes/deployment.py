"""The engine Deployment: the backend's container, the flash loader, GPUs and placement.

GPU models use the ``Recreate`` strategy: a rolling update would start the new pod before
the old one frees its GPU, and on a full GPU node it would never schedule. Service links are
off: a Service called ``vllm`` in the namespace would otherwise inject ``VLLM_PORT``, which
vLLM reads as its own setting.
"""

from __future__ import annotations

from flexinfer_controller.flashload.render import FlashPod, init_container
from flexinfer_controller.runtime.kubernetes import configmap, engine, scheduling
from flexinfer_controller.runtime.kubernetes.context import RenderContext
from flexinfer_controller.runtime.kubernetes.names import (
    SERVICE_LABELS_ANNOTATION,
    SOURCE_ANNOTATION,
    VRAM_ANNOTATION,
    Obj,
    labels,
    metadata,
    object_name,
    selector_labels,
)
from flexinfer_controller.runtime.kubernetes.trace import trace_env

OLLAMA_PULL = (
    'until ollama list >/dev/null 2>&1; do sleep 1; done; ollama pull "$0" && ollama cp "$0" "$1"'
)
"""postStart of Ollama: pull the tag, then copy it to the served name (probes wait for it)."""


def tmpfs_size(ctx: RenderContext) -> str:
    """flashLoader.tmpfsSizeLimit, else cache.size with the flash loader, else the shm default."""
    spec = ctx.model.spec.cache
    if ctx.flash is not None and spec is not None:
        flash = spec.flash_loader
        return (flash.tmpfs_size_limit if flash else None) or spec.size
    return ctx.options.shm_size_limit


def mounts(ctx: RenderContext) -> engine.Mounts:
    """The pod's volume layout."""
    return engine.Mounts(
        cache=ctx.cache,
        model_mount=ctx.options.model_mount,
        tmpfs_size_limit=tmpfs_size(ctx),
        node_tmpfs=ctx.flash is not None and ctx.cache.strategy == "Memory",
    )


def flash_container(ctx: RenderContext) -> Obj | None:
    """The flash loader init container, when it is on."""
    if ctx.flash is None:
        return None
    spec = ctx.model.spec.cache.flash_loader if ctx.model.spec.cache else None
    pod = FlashPod(
        key=ctx.model.key, cache_claim=ctx.cache.claim or "", model_subpath=ctx.weights,
        cache_mount=ctx.options.model_mount, tmpfs_size_limit=tmpfs_size(ctx),
        image=(spec.image if spec else None) or ctx.options.controller_image,
    )  # fmt: skip
    return init_container(pod, ctx.flash)


def engine_container(ctx: RenderContext) -> Obj:
    """The engine container, with Ollama's pull hook and the scale-up's ``TRACEPARENT``."""
    resources = scheduling.resources(ctx.model, ctx.vendor)
    out = engine.container(ctx.engine, resources, mounts(ctx))
    # Fixed in the template; each start writes the value (trace.py says why).
    out.setdefault("env", []).append(trace_env(ctx.model))
    if ctx.engine.pull:
        command = ["sh", "-c", OLLAMA_PULL, ctx.engine.pull, ctx.engine.served_name]
        out["lifecycle"] = {"postStart": {"exec": {"command": command}}}
    return out


def scrape_annotations(ctx: RenderContext) -> dict[str, str]:
    """``prometheus.io/*``: a Prometheus discovering pods by annotation scrapes the engine
    (none for a backend that serves no metrics)."""
    path = ctx.backend.metrics_path
    if path is None:
        return {}
    return {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(ctx.engine.port),
        "prometheus.io/path": path,
    }


def pod_annotations(ctx: RenderContext) -> dict[str, str]:
    """What the scheduler extender, discovery and Prometheus read off the pod."""
    spec = ctx.model.spec
    out = {SOURCE_ANNOTATION: spec.source, **scrape_annotations(ctx)}
    if spec.gpu and spec.gpu.vram_estimate_mb is not None:
        out[VRAM_ANNOTATION] = str(spec.gpu.vram_estimate_mb)
    if spec.service_labels:
        out[SERVICE_LABELS_ANNOTATION] = ",".join(spec.service_labels)
    return out


def pod_spec(ctx: RenderContext) -> Obj:
    """The pod template's spec."""
    spec: Obj = {"enableServiceLinks": False}
    if (init := flash_container(ctx)) is not None:
        spec["initContainers"] = [init]
    spec["containers"] = [engine_container(ctx)]
    spec["volumes"] = engine.volumes(mounts(ctx))
    configmap.apply_to_pod(ctx, spec)
    if ctx.model.spec.node_selector:
        spec["nodeSelector"] = dict(ctx.model.spec.node_selector)
    if tolerations := scheduling.tolerations(ctx.model, ctx.gpus):
        spec["tolerations"] = tolerations
    if (affinity := scheduling.affinity(ctx.vendor, ctx.gpus, ctx.options.gpu)) is not None:
        spec["affinity"] = affinity
    return spec


def deployment(ctx: RenderContext) -> Obj:
    """The Deployment, with ``replicas`` from the desired count."""
    model, backend = ctx.model, ctx.backend_name
    strategy: Obj = (
        {"type": "Recreate"}
        if ctx.gpus
        else {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"},
        }
    )
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(
            model,
            object_name(model.metadata.name),
            labels(model, backend, "engine"),
            pod_annotations(ctx),
        ),
        "spec": {
            "replicas": ctx.options.replicas,
            "selector": {"matchLabels": selector_labels(model)},
            "strategy": strategy,
            "template": {
                "metadata": {
                    "labels": labels(model, backend, "engine"),
                    "annotations": pod_annotations(ctx),
                },
                "spec": pod_spec(ctx),
            },
        },
    }
