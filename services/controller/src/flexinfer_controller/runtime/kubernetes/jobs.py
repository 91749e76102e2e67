"""The cache Jobs: prefetch through the registry, quantization, and the flash cleanup.

The prefetch Job runs the registry client (``flexinfer mx model download --cache-dir``): it
calls the registry's EnsureModelDownloaded, then streams the registry's copy into the cache
volume at ``<provider>/<name>``; where the registry cannot be reached it downloads directly
to the same path (SmartFallback). Jobs are never updated (their pod template
is immutable): a changed spec gets a new Job, named by a hash of what it does.
"""

from __future__ import annotations

import hashlib
import json

from flexinfer_controller.backends.base import SecretKeyRef
from flexinfer_controller.flashload.render import CACHE_VOLUME, cleanup_job
from flexinfer_controller.quantize.errors import EXIT_REFUSED
from flexinfer_controller.runtime.kubernetes import scheduling
from flexinfer_controller.runtime.kubernetes.cache import Fetch
from flexinfer_controller.runtime.kubernetes.context import RenderContext
from flexinfer_controller.runtime.kubernetes.names import (
    CACHE_DEST_ANNOTATION,
    CACHE_KIND_ANNOTATION,
    CACHE_PATH_ANNOTATION,
    SOURCE_ANNOTATION,
    Obj,
    labels,
    metadata,
    object_name,
)
from flexinfer_controller.runtime.kubernetes.options import QUANTIZER_COMMAND

REGISTRY_CLI = ["python", "-m", "flexinfer_registry.client.mx_cli"]
REGISTRY_TOKEN_ENV = "FLEXINFER_REGISTRY_AUTH_TOKEN"
"""What the registry client sends as its bearer token (``mx_cli.TOKEN_ENV``)."""
PREFETCH_CONTAINER = "prefetch"
_UID = 10001


def job_name(base: str, component: str, *rendered: object) -> str:
    """``<base>-<component>-<hash of what the Job does>``: a changed Job gets a new name."""
    digest = hashlib.sha256(json.dumps(list(rendered), sort_keys=True).encode()).hexdigest()[:6]
    return object_name(base, f"{component}-{digest}")


def cache_volume(claim: str | None, host_path: str | None) -> Obj:
    """The cache volume, writable (the engine's copy is read-only): a claim or a node path."""
    if claim is not None:
        return {"name": CACHE_VOLUME, "persistentVolumeClaim": {"claimName": claim}}
    assert host_path is not None  # a Job exists only for a cache with a volume
    return {"name": CACHE_VOLUME, "hostPath": {"path": host_path, "type": "DirectoryOrCreate"}}


def job_spec(job_labels: dict[str, str], container: Obj, pod: Obj, *volumes: Obj) -> Obj:
    """The spec of a cache Job: one container, the cache volume (and any other), retried
    three times."""
    return {
        "backoffLimit": 3,
        "template": {
            "metadata": {"labels": dict(job_labels)},
            "spec": {
                "restartPolicy": "OnFailure",
                "containers": [container],
                "volumes": list(volumes),
                **pod,
            },
        },
    }


def fail_on_exit_codes(spec: Obj, container: str, codes: list[int]) -> Obj:
    """``spec`` failing at once when ``container`` exits with one of ``codes`` (a refusal
    that a retry would only repeat), instead of after its backoffLimit.

    A pod failure policy needs pods that are not restarted in place; a node's eviction of
    the pod (DisruptionTarget) is not counted against the Job, as Kubernetes recommends.
    """
    spec["template"]["spec"]["restartPolicy"] = "Never"
    spec["podFailurePolicy"] = {
        "rules": [
            {
                "action": "Ignore",
                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
            },
            {
                "action": "FailJob",
                "onExitCodes": {"containerName": container, "operator": "In", "values": codes},
            },
        ]
    }
    return spec


def _job(
    ctx: RenderContext, component: str, container: Obj, pod: Obj, notes: Obj, refusals: list[int]
) -> Obj:
    job_labels = labels(ctx.model, ctx.backend_name, component)
    name = job_name(ctx.model.metadata.name, component, container, pod)
    volume = cache_volume(ctx.cache.claim, ctx.cache.host_path)
    spec = job_spec(job_labels, container, pod, volume)
    if refusals:
        spec = fail_on_exit_codes(spec, container["name"], refusals)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(ctx.model, name, job_labels, notes),
        "spec": spec,
    }


def _mount(ctx: RenderContext) -> Obj:
    return {"name": CACHE_VOLUME, "mountPath": ctx.options.model_mount}


def prefetch_container(
    fetch: Fetch,
    image: str,
    registry_address: str,
    mount: Obj,
    cache_dir: str | None = None,
    strategy: str = "SmartFallback",
    token: SecretKeyRef | None = None,
) -> Obj:
    """The registry client downloading ``fetch`` into ``cache_dir`` (default: the mount's
    root) of the volume mounted as ``mount``; with ``token``, it sends the registry's fetch
    token read from that Secret key (the pod spec holds only the Secret's name). It calls
    EnsureModelDownloaded, ListModelFiles and StreamModelFiles, all the fetch scope opens."""
    args = ["--server", registry_address, "model", "download", fetch.name]
    args += ["--provider", fetch.provider] if fetch.provider else []
    args += ["--strategy", strategy, "--cache-dir", cache_dir or mount["mountPath"]]
    return {
        "name": PREFETCH_CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": REGISTRY_CLI,
        "args": args,
        "env": [{"name": "HOME", "value": "/tmp"}, *_token_env(token)],
        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "2Gi"}},
        "volumeMounts": [mount],
    }


def _token_env(token: SecretKeyRef | None) -> list[Obj]:
    if token is None:
        return []
    ref = {"name": token.name, "key": token.key}
    return [{"name": REGISTRY_TOKEN_ENV, "valueFrom": {"secretKeyRef": ref}}]


def prefetch_pod() -> Obj:
    """The prefetch pod's settings: a non-root user that owns what it writes."""
    return {"securityContext": {"runAsNonRoot": True, "runAsUser": _UID, "fsGroup": _UID}}


def prefetch_job(ctx: RenderContext) -> Obj | None:
    """The Job filling the cache from the registry; None when nothing is fetched."""
    fetch = ctx.cache.fetch
    if fetch is None:
        return None
    options = ctx.options
    container = prefetch_container(
        fetch, options.registry_image, options.registry_address, _mount(ctx),
        token=options.registry_fetch_token_secret,
    )  # fmt: skip
    pod = prefetch_pod()
    notes = {
        SOURCE_ANNOTATION: ctx.model.spec.source,
        CACHE_KIND_ANNOTATION: ctx.cache.strategy,
        CACHE_PATH_ANNOTATION: fetch.subpath,
    }
    return _job(ctx, "prefetch", container, pod, notes, [])


def quantize_job(ctx: RenderContext) -> Obj | None:
    """The quantization Job (after the prefetch); GPU and toleration with ``useGPU``.

    Without an image of its own it runs the built-in quantizer from the controller's image,
    as the prefetch's user; another image runs its own entrypoint with the same variables.
    """
    quant = ctx.quantize
    if quant is None:
        return None
    root = ctx.options.model_mount
    env = {"QUANTIZE_FORMAT": quant.format, "QUANTIZE_INPUT": f"{root}/{quant.input}",
           "QUANTIZE_OUTPUT": f"{root}/{quant.output}", **quant.settings}  # fmt: skip
    container: Obj = {
        "name": "quantize",
        "image": quant.image or ctx.options.controller_image,
        "imagePullPolicy": "IfNotPresent",
        "env": [{"name": k, "value": v} for k, v in sorted(env.items())],
        "resources": scheduling.resources(ctx.model, ctx.vendor if quant.use_gpu else "cpu"),
        "volumeMounts": [_mount(ctx)],
    }
    pod: Obj = {}
    if quant.image is None:
        container["command"] = list(QUANTIZER_COMMAND)
        pod = prefetch_pod()
    gpus = ctx.gpus if quant.use_gpu else 0
    if gpus:
        pod["tolerations"] = scheduling.tolerations(ctx.model, gpus)
        pod["affinity"] = scheduling.affinity(ctx.vendor, gpus, ctx.options.gpu)
    notes = {CACHE_PATH_ANNOTATION: quant.input, CACHE_DEST_ANNOTATION: quant.output}
    # The built-in quantizer exits 2 on a request it refuses (a format it cannot convert):
    # running it again would refuse again. Another image's exit codes are its own.
    refusals = [EXIT_REFUSED] if quant.image is None else []
    return _job(ctx, "quantize", container, pod, notes, refusals)


def flash_cleanup_job(ctx: RenderContext, node: str, keep: list[str]) -> Obj | None:
    """On deletion: the Job removing stale copies from ``node``'s /dev/shm but ``keep``'s
    (the Models still declared there), so the deleted Model's copy goes.

    Only a node tmpfs (cache strategy Memory) outlives the pods; an emptyDir is gone with
    them, so other models need none. One Job per node the Model ran on, named after it.
    """
    if ctx.flash is None or ctx.cache.strategy != "Memory":
        return None
    model = ctx.model
    name = job_name(model.metadata.name, "flash-cleanup", node)
    job = cleanup_job(name, model.metadata.namespace, keep, node_name=node,
                      image=ctx.options.controller_image)  # fmt: skip
    job["metadata"] = metadata(model, name, labels(model, ctx.backend_name, "flash-cleanup"), {})
    # The Model is going away: an owner reference would let the collector delete the Job
    # before it ran. Its TTL removes it instead.
    del job["metadata"]["ownerReferences"]
    return job
