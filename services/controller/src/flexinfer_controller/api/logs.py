"""GET /v1/admin/models/{name}/logs: a replica's captured output, streamed (and followed).

The runtime decides which file (or, on Kubernetes, which pod log) a replica's output is;
the request only picks one of the replicas the runtime names, never a path.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response, StreamingResponse

from flexinfer_common.web import error_responses, openai_error
from flexinfer_controller.api.admin import NamePath, NamespaceQuery, Service, Settings
from flexinfer_controller.runtime import LogRequest, LogsUnsupportedError

REPLICA_HEADER = "X-FlexInfer-Replica"
"""Which replica's output the body is."""

ReplicaQuery = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=300,
        pattern=r"^[A-Za-z0-9][-A-Za-z0-9_.]*$",
        description="a replica id (default: the newest replica)",
    ),
]


def logs_router() -> APIRouter:
    """The logs route, under /v1/admin."""
    router = APIRouter(prefix="/v1/admin", tags=["admin"])

    @router.get(
        "/models/{name}/logs",
        summary="A replica's captured stdout and stderr (follow=true streams new output)",
        response_model=None,
        responses={
            200: {
                "description": "the replica's output as text (chunked; endless with follow)",
                "content": {"text/plain": {"schema": {"type": "string"}}},
                "headers": {REPLICA_HEADER: {"schema": {"type": "string"}}},
            },
            **error_responses(400, 404, 501, 503),
        },
    )
    async def model_logs(
        name: NamePath,
        request: Request,
        service: Service,
        settings: Settings,
        namespace: NamespaceQuery = None,
        replica: ReplicaQuery = None,
        follow: bool = False,
        tail_lines: Annotated[int | None, Query(alias="tailLines", ge=0)] = None,
    ) -> Response:
        ask = LogRequest(follow=follow, tail_lines=tail_lines)
        try:
            chosen, chunks = await service.logs(namespace or settings.namespace, name, replica, ask)
        except LogsUnsupportedError as exc:
            return openai_error(501, str(exc), code="logs_unsupported")
        # Starlette cancels the stream when the client disconnects, which ends a follow.
        return StreamingResponse(
            chunks,
            media_type="text/plain; charset=utf-8",
            headers={REPLICA_HEADER: chosen.id, "Cache-Control": "no-store"},
        )

    return router
