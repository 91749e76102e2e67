"""Topic names and event payloads that cross service boundaries.

Payloads are plain JSON objects validated by these pydantic models at both ends, so a
producer and a consumer of different versions fail loudly instead of misreading each other.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

DEMAND = "flexinfer.demand"
"""proxy → controller: a model has queued requests and needs replicas."""

ACTIVITY = "flexinfer.activity"
"""proxy → controller: a model served requests (throttled per model)."""

ENDPOINTS = "flexinfer.endpoints"
"""controller → proxy: the full set of endpoints of one model, after every change."""

MODELS = "flexinfer.models"
"""controller → everyone: a Model was created, changed or deleted."""

ADAPTERS = "flexinfer.adapters"
"""controller → everyone: a LoRAAdapter was created, changed or deleted."""

PROGRESS = "flexinfer.progress"
"""controller/engine → proxy: how far a model's cold start has come (phase, eta)."""

NODES = "flexinfer.nodes"
"""agent → controller (local mode): one node's GPUs, every heartbeat (``NodeInventoryEvent``)."""

PROGRESS_PHASES = ("scheduled", "pulling", "loading-weights", "warming", "ready")
"""Cold-start phases in the order a model goes through them."""


class Event(BaseModel):
    """Base of bus payloads: strict, so schema drift between services is an error."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class DemandEvent(Event):
    """Requests for ``model`` are waiting in a proxy's queue."""

    model: str = Field(description="namespace/name of the Model")
    queue_depth: int = Field(ge=0)
    since: datetime
    proxy: str = Field(description="the proxy replica that queued them")
    adapter: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="the LoRA adapter name (spec.adapterName) the requests are for, when it "
        "is not loaded yet: the controller loads it into the Model's engines. Left out of "
        "the payload when None, so that consumers that predate it read the event",
    )
    traceparent: str | None = Field(
        default=None,
        pattern=r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$",
        description="W3C traceparent of the first traced request that waits: the controller's "
        "scale-up span joins that request's trace. Left out of the payload when None",
    )


class ActivityEvent(Event):
    """``model`` served requests at ``at``; ``active`` connections were open."""

    model: str
    at: datetime
    active: int = Field(ge=0)


class EndpointInfo(Event):
    """One ready replica of a model."""

    url: str = Field(description="base URL of the OpenAI-compatible server, without /v1")
    replica: str
    ready: bool = True
    node: str | None = None
    terminating: bool = False
    """The replica's node is being reclaimed (spot termination): proxies stop routing to it."""
    adapters: list[Annotated[str, Field(min_length=1, max_length=256)]] | None = Field(
        default=None,
        max_length=4096,
        description="the LoRA adapters (spec.adapterName) the replica's engine holds now, "
        "for a Model whose engines take adapters: a proxy routes a request for an adapter "
        "only to a replica that holds it. None: the controller does not say (the Model takes "
        "no adapters, or the controller predates the field), and any replica may serve it. "
        "Left out of the payload when None, so that consumers that predate it read the event",
    )


class EndpointsEvent(Event):
    """The complete endpoint set of ``model``; an empty list means none are ready."""

    model: str
    endpoints: list[EndpointInfo]
    phase: str
    revision: int = Field(ge=0, description="monotonic per model, to drop stale events")
    blocked: str | None = Field(
        default=None,
        max_length=4096,
        description="why the model cannot get a ready endpoint until something changes "
        "(Failed, or a source that does not exist): proxies answer its requests at once",
    )


class ModelChangedEvent(Event):
    """``model`` was created, updated or deleted (``deleted``)."""

    model: str
    generation: int
    deleted: bool = False


class AdapterChangedEvent(Event):
    """LoRAAdapter ``adapter`` (on base Model ``model``) was created, updated or deleted."""

    adapter: str = Field(description="namespace/name of the LoRAAdapter")
    model: str = Field(description="namespace/name of its base Model (spec.modelRef)")
    generation: int
    deleted: bool = False


class ProgressEvent(Event):
    """``model``'s cold start reached ``phase``; ``eta_s`` estimates the seconds to ready."""

    model: str
    phase: Literal["scheduled", "pulling", "loading-weights", "warming", "ready"]
    at: datetime
    eta_s: float | None = Field(default=None, ge=0)
    source: str = Field(default="controller", description="who published it")
    progress: float | None = Field(default=None, ge=0, le=1)
    """Fraction of the weights downloaded, in phase ``pulling`` (None: unknown)."""
    bytes_done: int | None = Field(default=None, ge=0)
    """Bytes of the weights downloaded so far, in phase ``pulling``."""
    bytes_total: int | None = Field(default=None, ge=0)
    """Bytes of the weights in all, when known."""


class NodeGPUGroup(Event):
    """GPUs of one model on a node, in the fields of the controller's declared inventory."""

    vendor: Literal["nvidia", "amd", "intel", "apple"]
    count: int = Field(ge=1)
    arch: str | None = Field(default=None, max_length=32)
    """``sm_90``, ``gfx942``: what ``flexinfer.ai/gpu.arch`` says on a node."""
    vram: str | None = Field(default=None, max_length=32)
    """Memory of one GPU as a quantity (``80Gi``), as ``flexinfer.ai/gpu.vram``."""
    device_class: str = Field(max_length=63)
    """The normalised model name (``nvidia-h100-80gb-hbm3``): the TPS key's deviceClass."""
    int4: bool
    free_mib: int | None = Field(default=None, ge=0)
    """MiB free over these GPUs now; None when the discovery source does not say."""


class NodeInventoryEvent(Event):
    """A node agent's heartbeat: what GPUs ``node`` has, and the node keys it would set.

    ``labels`` and ``annotations`` are exactly what the agent patches onto its Node on
    Kubernetes (``flexinfer.ai/gpu.*``), so a consumer can read both modes the same way;
    ``gpus`` groups the GPUs by model. A node whose events stop for a few ``interval_s``
    has gone away.
    """

    node: str = Field(min_length=1, max_length=253)
    at: datetime
    interval_s: float = Field(gt=0, description="seconds until the next heartbeat is due")
    source: str | None = Field(default=None, description="the discovery source that answered")
    gpus: list[NodeGPUGroup]
    labels: dict[str, str]
    annotations: dict[str, str]
