"""The PodDisruptionBudget of a Model that keeps two or more warm replicas.

With serverless.minReplicas >= 2 the operator means to keep capacity up; a drain may then
take one engine at a time (maxUnavailable 1). Models that scale to zero or keep one replica
get none: a budget on one pod would block every node drain.
"""

from __future__ import annotations

from flexinfer_controller.runtime.kubernetes.context import RenderContext
from flexinfer_controller.runtime.kubernetes.names import (
    Obj,
    labels,
    metadata,
    object_name,
    selector_labels,
)

MIN_REPLICAS_FOR_BUDGET = 2


def pod_disruption_budget(ctx: RenderContext) -> Obj | None:
    """``<model>`` with maxUnavailable 1, when minReplicas >= 2."""
    model = ctx.model
    if model.spec.serverless_or_default.min_replicas < MIN_REPLICAS_FOR_BUDGET:
        return None
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(
            model, object_name(model.metadata.name), labels(model, ctx.backend_name, "engine"), {}
        ),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(model)}},
    }
