"""What RdmaStrategy needs from a peer transfer manager (the NIXL one, or another)."""

from __future__ import annotations

from typing import Protocol

import torch

from flexinfer_transfer.selector import SourceCandidate
from flexinfer_transfer.strategy import LoadContext


class PeerTransport(Protocol):
    """Lists READY sources and pulls a model's tensors from one of them."""

    name: str

    def list_sources(self, ctx: LoadContext) -> list[SourceCandidate]:
        """READY workers serving this model (ListSources); may include incompatible ones."""

    def receive(self, candidate: SourceCandidate, ctx: LoadContext) -> dict[str, torch.Tensor]:
        """Every tensor from ``candidate``. Sets ``ctx.target_mutated`` before writing into
        the target; raises SourceTransferError (wrapping ManifestMismatchError and any
        other receive failure) when this source cannot deliver."""
