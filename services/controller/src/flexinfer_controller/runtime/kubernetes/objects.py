"""Every object the controller creates for a Model, in the order it creates them.

Order follows the reconcile flowchart: ensureService, then ensureCache (PVC, prefetch
Job, quantization Job), then ensureDeployment; the backend's ConfigMap comes before the
Deployment that mounts it, the PodDisruptionBudget after it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from flexinfer_common.api import Model
from flexinfer_controller.backends.base import BackendRegistry
from flexinfer_controller.runtime.kubernetes import cache, configmap, disruption, jobs
from flexinfer_controller.runtime.kubernetes.context import RenderContext, build_context
from flexinfer_controller.runtime.kubernetes.deployment import deployment
from flexinfer_controller.runtime.kubernetes.names import Obj
from flexinfer_controller.runtime.kubernetes.options import RenderOptions
from flexinfer_controller.runtime.kubernetes.service import service


def _pvc(ctx: RenderContext) -> Obj | None:
    return cache.persistent_volume_claim(ctx.model, ctx.backend_name, ctx.cache)


RENDERERS: tuple[Callable[[RenderContext], Obj | None], ...] = (
    service,
    _pvc,
    jobs.prefetch_job,
    jobs.quantize_job,
    configmap.config_map,
    deployment,
    disruption.pod_disruption_budget,
)


def render_context(ctx: RenderContext) -> list[Obj]:
    """The objects of an already built context."""
    return [obj for render in RENDERERS if (obj := render(ctx)) is not None]


def render_model(model: Model, backends: BackendRegistry, options: RenderOptions) -> list[Obj]:
    """What reconciling ``model`` creates (InvalidSpecError/UnsupportedBackendError if it can't)."""
    return render_context(build_context(model, backends, options))


def render_service(model: Model, backends: BackendRegistry, options: RenderOptions) -> Obj:
    """ensureService alone: the Service of a Model not placed yet (it needs no GPU)."""
    return service(build_context(model, backends, options))


def render_cleanup(
    model: Model,
    backends: BackendRegistry,
    options: RenderOptions,
    nodes: Sequence[str] = (),
    keep: list[str] | None = None,
) -> list[Obj]:
    """What deleting ``model`` creates: a flash cleanup Job on each of ``nodes`` where a
    node tmpfs held its copy."""
    ctx = build_context(model, backends, options)
    found = (jobs.flash_cleanup_job(ctx, node, keep or []) for node in sorted(set(nodes)))
    return [job for job in found if job is not None]
