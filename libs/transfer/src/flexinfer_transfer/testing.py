"""An in-process peer transport: the RdmaStrategy contract without NIXL.

It copies a source module's discovered tensors into the target module's, through the same
manifest check a NIXL pull makes, so the chain's retry, reinitialisation and fallback
rules can be tested with real torch modules. Sources can be made to fail mid-copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from flexinfer_transfer.discovery import check_manifest, discover_tensors
from flexinfer_transfer.errors import SourceTransferError
from flexinfer_transfer.nixl_transport import ModuleHolder
from flexinfer_transfer.selector import SourceCandidate
from flexinfer_transfer.strategy import LoadContext


@dataclass
class LocalSource:
    """A live model acting as a source; ``fail_after`` regions copied, then it dies."""

    candidate: SourceCandidate
    module: nn.Module
    fail_after: int | None = None


@dataclass
class ModuleTarget:
    """A LoadTarget holding a module built by ``build``; reinitialise builds a fresh one."""

    build: type[nn.Module] | None = None
    module: nn.Module = field(default_factory=nn.Module)
    reinitialized: int = 0

    def reinitialize(self) -> None:
        """A fresh module replaces the possibly half-written one."""
        assert self.build is not None
        self.module = self.build()
        self.reinitialized += 1


@dataclass
class LocalTransport:
    """PeerTransport over in-process modules."""

    sources: list[LocalSource]
    target: ModuleHolder
    name: str = "local"
    received_from: list[str] = field(default_factory=list)

    def list_sources(self, ctx: LoadContext) -> list[SourceCandidate]:
        """Every source's candidate."""
        return [source.candidate for source in self.sources]

    def receive(self, candidate: SourceCandidate, ctx: LoadContext) -> dict[str, torch.Tensor]:
        """Copy ``candidate``'s regions into the target's, after the manifest check."""
        source = next(s for s in self.sources if s.candidate == candidate)
        try:
            return self._copy(source, ctx)
        except Exception as exc:
            raise SourceTransferError(f"receive from {candidate.key} failed: {exc}") from exc

    def _copy(self, source: LocalSource, ctx: LoadContext) -> dict[str, torch.Tensor]:
        have = discover_tensors(source.module)
        want = discover_tensors(self.target.module)
        check_manifest([(e.name, e.size) for e in have], want)
        by_name = {e.name: e for e in have}
        ctx.target_mutated = True
        for copied, entry in enumerate(want):
            if source.fail_after is not None and copied >= source.fail_after:
                raise ConnectionError("source went away mid-transfer")
            entry.tensor.copy_(by_name[entry.name].tensor)
        self.received_from.append(source.candidate.key)
        return dict(self.target.module.state_dict())
