"""The Jobs that put a HuggingFace or OCI LoRAAdapter into its base Model's cache volume,
and take it out again.

The fetch Job is the Model's prefetch container (the registry client, SmartFallback) with
its cache dir set to the adapter's own directory, ``<mount>/lora-adapters/<ns>_<name>``:
the download lands in ``<provider>/<name>`` below it, where the engines (which mount the
same volume) load it from. On delete a cleanup Job removes that directory. Both are owned
by the Model, so they go with it; Jobs are never updated: a new source gets a new name.
"""

from __future__ import annotations

from flexinfer_common.api import LoRAAdapter
from flexinfer_controller.flashload.render import CACHE_VOLUME
from flexinfer_controller.runtime.kubernetes.cache import fetch_for
from flexinfer_controller.runtime.kubernetes.context import RenderContext
from flexinfer_controller.runtime.kubernetes.jobs import (
    cache_volume,
    job_name,
    job_spec,
    prefetch_container,
    prefetch_pod,
)
from flexinfer_controller.runtime.kubernetes.names import (
    SOURCE_ANNOTATION,
    Obj,
    label_value,
    labels,
    metadata,
)

ADAPTERS_DIR = "lora-adapters"
"""The directory of the cache volume that fetched adapters go in."""
FETCH = "lora-fetch"
CLEANUP = "lora-cleanup"
ADAPTER_LABEL = "flexinfer.ai/lora-adapter"
"""The LoRAAdapter (its name) a Job is for."""
CLEANUP_TTL_S = 300


def volume_problem(ctx: RenderContext) -> str | None:
    """Why the base Model has no cache volume an adapter could be fetched into (None: it
    has one: a PVC, or the Local strategy's node directory, both the cache's own)."""
    plan = ctx.cache
    if plan.claim is not None or (plan.host_path is not None and plan.fetch is not None):
        return None
    key = ctx.model.key
    if plan.host_path is not None:
        return (
            f"Model {key} serves a node directory ({ctx.model.spec.source}), which is not a "
            "cache the controller writes to: put the adapter's files where the engine can "
            f"read them (mounted at {ctx.options.model_mount}) and use a LocalPath source"
        )
    return (
        f"Model {key} has no cache volume (spec.cache.strategy None, or a backend that pulls "
        "its model itself) to fetch the adapter into: give it a cache, or use a LocalPath "
        "source"
    )


def adapter_dir(ctx: RenderContext, adapter: LoRAAdapter) -> str:
    """The adapter's directory as the engines see it (the fetch's cache dir)."""
    meta = adapter.metadata
    return f"{ctx.options.model_mount.rstrip('/')}/{ADAPTERS_DIR}/{meta.namespace}_{meta.name}"


def fetch_job(ctx: RenderContext, adapter: LoRAAdapter, source: str) -> tuple[Obj, str]:
    """The Job fetching ``source`` (``hf://…``, ``oci://…``) into the adapter's directory,
    and the path the engines load the adapter from once it succeeded."""
    fetch = fetch_for(source)
    directory = adapter_dir(ctx, adapter)
    mount = {"name": CACHE_VOLUME, "mountPath": ctx.options.model_mount}
    options = ctx.options
    container = prefetch_container(
        fetch, options.registry_image, options.registry_address, mount, cache_dir=directory,
        token=options.registry_fetch_token_secret,
    )  # fmt: skip
    job = _job(ctx, adapter, FETCH, container, prefetch_pod(), {SOURCE_ANNOTATION: source})
    return job, f"{directory}/{fetch.subpath}"


def cleanup_job(ctx: RenderContext, adapter: LoRAAdapter) -> Obj:
    """The Job removing the adapter's directory from the cache volume (as the fetch's user,
    who owns it), itself removed a while after it finished."""
    directory = adapter_dir(ctx, adapter)
    mount = {"name": CACHE_VOLUME, "mountPath": ctx.options.model_mount}
    container: Obj = {
        "name": CLEANUP,
        "image": ctx.options.controller_image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["rm", "-rf", "--", directory],
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
        "volumeMounts": [mount],
    }
    job = _job(ctx, adapter, CLEANUP, container, prefetch_pod(), {})
    job["spec"]["ttlSecondsAfterFinished"] = CLEANUP_TTL_S
    return job


def _job(ctx: RenderContext, adapter: LoRAAdapter, component: str, container: Obj, pod: Obj,
         notes: Obj) -> Obj:  # fmt: skip
    job_labels = labels(ctx.model, ctx.backend_name, component)
    job_labels[ADAPTER_LABEL] = label_value(adapter.metadata.name)
    name = job_name(adapter.metadata.name, component, container, pod)
    volume = cache_volume(ctx.cache.claim, ctx.cache.host_path)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(ctx.model, name, job_labels, notes),
        "spec": job_spec(job_labels, container, pod, volume),
    }
