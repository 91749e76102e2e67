"""NixlSource: a live model's tensors served to peers through a NixlTransferManager.

The source registers the model's memory (one registration per contiguous pool) and keeps
its agent's UCX worker progressing: with the progress thread off (it halves READ speed on
2 cores) nothing else answers a new peer's connection wire-up, so a small pump thread
polls the agent's notifications, which also collects the ones targets send after a READ.
"""

from __future__ import annotations

import threading
from collections import Counter

import torch
from torch import nn

from flexinfer_transfer.directory import RemoteTensor, SourceManifest
from flexinfer_transfer.discovery import discover_tensors
from flexinfer_transfer.nixl_manager import NixlTransferManager
from flexinfer_transfer.pools import memory_type, tensor_region

PUMP_INTERVAL_S = 0.002
"""How often an idle source progresses its agent: a peer's connection wire-up waits at
most this long, and a 2 ms poll costs well under 1% of a core."""


class NixlSource:
    """Registers a module's tensors and keeps the agent progressing until closed."""

    def __init__(
        self,
        manager: NixlTransferManager,
        module: nn.Module,
        *,
        pooled: bool = True,
        accelerator: str = "",
    ) -> None:
        self.manager = manager
        self.entries = discover_tensors(module)
        self.accelerator = accelerator
        self.notifications: Counter[str] = Counter()
        """Notifications received, by peer agent (targets notify after each pull)."""
        mem_type = memory_type(self.entries[0].tensor.device) if self.entries else "DRAM"
        regions = [tensor_region(e.tensor) for e in self.entries]
        self.registration = manager.register(regions, mem_type, pooled=pooled)
        self._metadata = manager.metadata()
        self._stop = threading.Event()
        self._pump = threading.Thread(target=self._run, name="nixl-source-pump", daemon=True)
        self._pump.start()

    def manifest(self) -> SourceManifest:
        """What a target needs to READ from this source."""
        return SourceManifest(
            agent_name=self.manager.name,
            agent_metadata=self._metadata,
            tensors=[RemoteTensor(e.name, *_where(e.tensor), dtype=e.dtype) for e in self.entries],
            accelerator=self.accelerator,
        )

    def _run(self) -> None:
        while not self._stop.wait(PUMP_INTERVAL_S):
            for peer, messages in self.manager.notifications().items():
                self.notifications[peer] += len(messages)

    def close(self) -> None:
        """Stop serving and deregister the memory."""
        self._stop.set()
        self._pump.join()
        self.manager.release(self.registration)


def _where(tensor: torch.Tensor) -> tuple[int, int, int]:
    region = tensor_region(tensor)
    return region.addr, region.size, region.device_id
