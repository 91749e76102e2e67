"""Plain records the registry stores: cached models and P2P source workers.

Enums mirror the ModelExpress protos value for value (``model_express.model.ModelStatus``,
``ModelProvider``; ``model_express.p2p.SourceStatus``), so a record converts to and from the
wire with ``int()``. Timestamps are Unix seconds (float); the gRPC edge converts to the
wire's units. Records are frozen: stores return copies, never live objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from flexinfer_common.mx_identity import SourceIdentity


class ModelStatus(IntEnum):
    """``model_express.model.ModelStatus``."""

    DOWNLOADING = 0
    DOWNLOADED = 1
    ERROR = 2


class Provider(IntEnum):
    """``model_express.model.ModelProvider``."""

    HUGGING_FACE = 0
    NGC = 1
    GCS = 2
    S3 = 3


class SourceStatus(IntEnum):
    """``model_express.p2p.SourceStatus``."""

    UNKNOWN = 0
    INITIALIZING = 1
    READY = 2
    STALE = 3


@dataclass(frozen=True)
class ModelRecord:
    """One cached model (the seed's ``mx:model:{name}`` hash).

    ``updated_at`` moves on every status write (including a downloader's progress
    heartbeats), so a DOWNLOADING claim whose ``updated_at`` is old has no live downloader.
    """

    name: str
    provider: Provider
    status: ModelStatus
    created_at: float
    last_used_at: float
    updated_at: float
    message: str | None = None


@dataclass(frozen=True)
class SourceRecord:
    """One worker of one P2P source (the seed's ``mx:source:{id}:{worker_id}`` hash).

    ``metadata`` is the serialized ``WorkerMetadata`` message as the worker published it;
    the store keeps it opaque. ``status``, ``updated_at`` and ``source_load`` are the
    record's own columns: UpdateStatus changes them without rewriting ``metadata``.
    """

    mx_source_id: str
    worker_id: str
    identity: SourceIdentity
    worker_rank: int
    status: SourceStatus
    updated_at: float
    metadata: bytes = b""
    accelerator: str = ""
    topology: dict[str, str] = field(default_factory=dict)
    source_load: float | None = None
    training_step: int | None = None
    layout_signature: str | None = None
    pod_name: str = ""
    pod_uid: str = ""
    pod_namespace: str = ""

    @property
    def model_name(self) -> str:
        """The identity's model name (what ListSources' model_name_filter matches)."""
        return self.identity.model_name


@dataclass(frozen=True)
class SourceQuery:
    """A ListSources filter; ``None`` means "any". Results are ordered by
    (mx_source_id, worker_rank, worker_id) and cut to ``limit``."""

    mx_source_id: str | None = None
    model_name: str | None = None
    status: SourceStatus | None = None
    min_updated_at: float | None = None
    worker_rank: int | None = None
    limit: int | None = None

    def matches(self, record: SourceRecord) -> bool:
        """Whether ``record`` passes every filter (``limit`` aside)."""
        return (
            (self.mx_source_id is None or record.mx_source_id == self.mx_source_id)
            and (self.model_name is None or record.model_name == self.model_name)
            and (self.status is None or record.status == self.status)
            and (self.min_updated_at is None or record.updated_at >= self.min_updated_at)
            and (self.worker_rank is None or record.worker_rank == self.worker_rank)
        )


def source_sort_key(record: SourceRecord) -> tuple[str, int, str]:
    """The order every SourceStore.list returns."""
    return (record.mx_source_id, record.worker_rank, record.worker_id)
