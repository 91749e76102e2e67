"""The engine Service: ClusterIP on the backend's port, selecting the Model's engine pods."""

from __future__ import annotations

from flexinfer_controller.runtime.kubernetes.context import RenderContext
from flexinfer_controller.runtime.kubernetes.engine import PORT_NAME
from flexinfer_controller.runtime.kubernetes.names import (
    SERVICE_LABELS_ANNOTATION,
    Obj,
    labels,
    metadata,
    object_name,
    selector_labels,
)


def service(ctx: RenderContext) -> Obj:
    """``<model>`` on the backend's port; the proxy reaches it as ``<model>.<ns>.svc``."""
    model = ctx.model
    notes: dict[str, str] = {}
    if model.spec.service_labels:
        notes[SERVICE_LABELS_ANNOTATION] = ",".join(model.spec.service_labels)
    port = ctx.engine.port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(
            model,
            object_name(model.metadata.name),
            labels(model, ctx.backend_name, "engine"),
            notes,
        ),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(model),
            "ports": [
                {"name": PORT_NAME, "port": port, "targetPort": PORT_NAME, "protocol": "TCP"}
            ],
        },
    }
