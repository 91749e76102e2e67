"""The kubernetes runtime's objects as plain dicts: pure functions, no cluster access.

``render_model`` gives every object reconciling a Model creates (Service, PVC, prefetch
and quantization Jobs, ConfigMap, Deployment, PodDisruptionBudget); ``render_cleanup``
what its deletion creates; ``merge`` compares and writes only the fields the controller
owns; ``rbac`` lists the API access the controller needs.
"""

from flexinfer_controller.runtime.kubernetes.context import RenderContext, build_context
from flexinfer_controller.runtime.kubernetes.objects import (
    render_cleanup,
    render_context,
    render_model,
)
from flexinfer_controller.runtime.kubernetes.options import GPUPlacement, RenderOptions

__all__ = [
    "GPUPlacement",
    "RenderContext",
    "RenderOptions",
    "build_context",
    "render_cleanup",
    "render_context",
    "render_model",
]
