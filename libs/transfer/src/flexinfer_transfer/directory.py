"""Where a peer transport learns about sources: READY workers, and one worker's manifest
(its NIXL agent metadata and tensor descriptors)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from flexinfer_transfer.selector import SourceCandidate
from flexinfer_transfer.strategy import LoadContext


@dataclass(frozen=True)
class RemoteTensor:
    """One region a source serves (ModelExpress's TensorDescriptor)."""

    name: str
    addr: int
    size: int
    device_id: int = 0
    dtype: str = ""


@dataclass(frozen=True)
class SourceManifest:
    """What a target needs to READ from one source worker."""

    agent_name: str
    agent_metadata: bytes
    tensors: list[RemoteTensor]
    accelerator: str = ""
    metadata_endpoint: str = ""
    """Where the agent's metadata listener runs, when ``agent_metadata`` is empty (the
    WorkerService path): the target fetches the metadata from there."""


class SourceDirectory(Protocol):
    """READY sources and their manifests (the registry, or a worker's WorkerService)."""

    def list_sources(self, ctx: LoadContext) -> list[SourceCandidate]:
        """READY workers serving ``ctx``'s model."""

    def manifest(self, candidate: SourceCandidate) -> SourceManifest:
        """``candidate``'s manifest; raises when it cannot be had."""
