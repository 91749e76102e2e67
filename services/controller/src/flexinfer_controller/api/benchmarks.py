"""Admin API of placement: the benchmark table it scores TPS from, and the GPUs it sees.

``flexinfer bench tps`` writes its measurement with ``PUT /v1/admin/benchmarks`` (local
mode's counterpart of the global ``flexinfer-benchmark-results`` ConfigMap) and reads the
device class of the node a Model runs on from ``GET /v1/admin/nodes``, so the result is
keyed exactly as the placement core looks it up.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request
from pydantic import Field, field_validator

from flexinfer_common.api.meta import ApiModel, utcnow
from flexinfer_common.backends import alias_table
from flexinfer_common.store import BenchmarkRecord, ModelStore
from flexinfer_controller.api.schema import document_responses
from flexinfer_controller.core.controller import Controller
from flexinfer_controller.core.placement import node_device_class
from flexinfer_controller.settings import ControllerSettings

NamespaceQuery = Annotated[
    str | None,
    Query(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"),
]


class BenchmarkInput(ApiModel):
    """One measured throughput of a Model on a device class."""

    backend: str = Field(min_length=1, max_length=63, pattern=r"^[a-z0-9][a-z0-9._-]*$")
    """The backend (an alias is stored as its canonical name)."""
    model: str = Field(
        min_length=1,
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
    )
    """The Model's name."""
    device_class: str = Field(max_length=1024, pattern=r"^[\x20-\x7e]*$")
    """The node's device class (``GET /v1/admin/nodes``), printable ASCII."""
    tokens_per_second: float = Field(ge=0)
    measured_at: datetime | None = None
    """When it was measured, RFC 3339 (default: when it was stored)."""

    @field_validator("tokens_per_second", mode="before")
    @classmethod
    def _a_number(cls, value: object) -> object:
        # Exactly what the schema says: a JSON number (not "12", not true), and finite.
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError("tokensPerSecond must be a number")
        if not math.isfinite(value):
            raise ValueError("tokensPerSecond must be a finite number")
        return value

    @field_validator("measured_at", mode="before")
    @classmethod
    def _a_timestamp(cls, value: object) -> object:
        if value is None or isinstance(value, datetime):
            return value
        try:
            parsed = datetime.fromisoformat(value) if isinstance(value, str) else None
        except ValueError:
            parsed = None
        if parsed is None or parsed.tzinfo is None:
            raise ValueError("measuredAt must be an RFC 3339 timestamp with its offset")
        return parsed


class BenchmarkView(BenchmarkInput):
    """A stored throughput, with the table's key."""

    key: str
    """``benchmark_key(backend, model, deviceClass)``: the global ConfigMap's key too."""


class BenchmarkList(ApiModel):
    """GET /v1/admin/benchmarks."""

    items: list[BenchmarkView]


class NodeView(ApiModel):
    """One node's GPUs as placement sees them."""

    node: str
    vendor: str
    count: int
    devices: list[int]
    arch: str | None = None
    vram_mb: int | None = Field(default=None, alias="vramMB")
    device_class: str
    """The benchmark key's device class for these GPUs."""


class NodeList(ApiModel):
    """GET /v1/admin/nodes."""

    items: list[NodeView]


def _view(record: BenchmarkRecord) -> BenchmarkView:
    return BenchmarkView(
        backend=record.backend,
        model=record.model,
        device_class=record.device_class,
        tokens_per_second=record.tokens_per_second,
        measured_at=record.measured_at,
        key=record.key,
    )


def benchmarks_router() -> APIRouter:
    """Routes under /v1/admin: benchmarks and nodes."""
    router = APIRouter(prefix="/v1/admin", tags=["admin"])

    @router.put(
        "/benchmarks",
        summary="Store a measured throughput (flexinfer bench tps)",
        responses=document_responses(BenchmarkView, {200: "stored"}, 400, 503),
    )
    async def put_benchmark(
        body: BenchmarkInput, request: Request, namespace: NamespaceQuery = None
    ) -> BenchmarkView:
        store: ModelStore = request.app.state.store
        settings: ControllerSettings = request.app.state.settings
        backend = alias_table().get(body.backend, body.backend)
        record = BenchmarkRecord(
            namespace=namespace or settings.namespace,
            backend=backend,
            model=body.model,
            device_class=body.device_class,
            tokens_per_second=body.tokens_per_second,
            measured_at=body.measured_at or utcnow(),
        )
        await store.put_benchmark(record)
        return _view(record)

    @router.get(
        "/benchmarks",
        summary="The benchmark table of a namespace",
        responses=document_responses(BenchmarkList, {200: "the table"}, 400, 503),
    )
    async def list_benchmarks(request: Request, namespace: NamespaceQuery = None) -> BenchmarkList:
        store: ModelStore = request.app.state.store
        settings: ControllerSettings = request.app.state.settings
        records = await store.list_benchmarks(namespace or settings.namespace)
        return BenchmarkList(items=[_view(r) for r in records])

    @router.get(
        "/nodes",
        summary="The GPUs placement sees (declared, and reported by node agents)",
        responses=document_responses(NodeList, {200: "the fleet"}, 400, 503),
    )
    async def list_nodes(request: Request) -> NodeList:
        controller: Controller = request.app.state.controller
        nodes = controller.inventory.nodes() or []
        return NodeList(
            items=[
                NodeView(
                    node=n.node,
                    vendor=n.vendor,
                    count=n.count,
                    devices=list(n.devices),
                    arch=n.arch,
                    vram_mb=n.vram_mb,
                    device_class=node_device_class(n),
                )
                for n in nodes
            ]
        )

    return router
