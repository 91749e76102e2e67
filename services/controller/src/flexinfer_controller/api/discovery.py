"""GET /v1/sd/engines: Prometheus HTTP service discovery of every engine replica.

Engines listen on ports the controller picks, so no hand-written scrape target can name
them; Prometheus reads this list instead (``http_sd_configs``). Each replica is one target
group: its engine's ``host:port``, with the model, replica and backend as labels. Replicas
of a backend that serves no metrics (``Backend.metrics_path`` None: Ollama) are left out,
since scraping them would only ever fail.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Request

from flexinfer_common.store import EndpointRecord, ModelStore
from flexinfer_common.telemetry import SD_ENGINES_PATH
from flexinfer_controller.backends import BackendRegistry

TargetGroup = dict[str, Any]


def discovery_router(backends: BackendRegistry) -> APIRouter:
    """The service-discovery route (open like /metrics; see ``open_paths``)."""
    router = APIRouter(tags=["telemetry"])

    @router.get(
        SD_ENGINES_PATH,
        summary="Every engine replica's metrics target, in Prometheus http_sd_configs JSON",
    )
    async def engines(request: Request) -> list[TargetGroup]:
        """One target group per replica the runtime runs, labelled model, replica, backend."""
        store: ModelStore = request.app.state.store
        groups = []
        models = {model.key: model for model in await store.list_models()}
        for record in await store.list_endpoints():
            model = models.get(record.model)
            backend = backends.get(model.spec.backend) if model is not None else None
            if backend is not None and backend.metrics_path is not None:
                groups.append(target_group(record, backend.name, backend.metrics_path))
        return groups

    return router


def target_group(record: EndpointRecord, backend: str, metrics_path: str) -> TargetGroup:
    """The http_sd target group of one replica, whose engine serves ``metrics_path`` under
    its base URL."""
    url = urlsplit(record.url)
    return {
        "targets": [url.netloc],
        "labels": {
            "model": record.model,
            "replica": record.replica,
            "backend": backend,
            "__scheme__": url.scheme or "http",
            "__metrics_path__": url.path.rstrip("/") + metrics_path,
        },
    }
