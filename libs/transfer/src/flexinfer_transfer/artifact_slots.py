"""Source chunk slots: registered DRAM buffers lent to one target's READ at a time.

PrepareArtifactChunk reads a chunk into a free slot and lends it under a lease id;
ReleaseArtifactChunk returns it. A lease a target never returns (it died) expires after
``timeout_s`` so the slot is reused; a target that reads after that gets other bytes,
which its CRC32C check catches.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field

import torch

from flexinfer_transfer.pools import Region, tensor_region


class SlotsBusyError(RuntimeError):
    """Every slot is lent; the target should release one or retry later."""


@dataclass
class Slot:
    """One registered buffer."""

    buffer: torch.Tensor = field(repr=False)

    @property
    def region(self) -> Region:
        """The buffer's address range."""
        return tensor_region(self.buffer)

    def view(self, length: int) -> memoryview:
        """The first ``length`` bytes, writable."""
        return self.buffer.numpy().data[:length]


@dataclass
class _Lease:
    slot: Slot
    payload: object
    until: float


class ChunkSlots:
    """``count`` buffers of ``size`` bytes with expiring leases."""

    def __init__(self, count: int, size: int, timeout_s: float) -> None:
        self.slots = [Slot(torch.empty(size, dtype=torch.uint8)) for _ in range(count)]
        self.timeout_s = timeout_s
        self._free = list(self.slots)
        self._leases: dict[str, _Lease] = {}
        self._lock = threading.Lock()

    def acquire(self) -> tuple[str, Slot]:
        """A free slot and its new lease id; SlotsBusyError when all are lent."""
        with self._lock:
            self._expire()
            if not self._free:
                raise SlotsBusyError(f"all {len(self.slots)} artifact chunk slots are lent")
            slot = self._free.pop()
            lease = uuid.uuid4().hex
            self._leases[lease] = _Lease(slot, None, time.monotonic() + self.timeout_s)
            return lease, slot

    def attach(self, lease: str, payload: object) -> None:
        """Remember what the lease lends (returned by ``release``)."""
        with self._lock:
            self._leases[lease].payload = payload

    def give_back(self, lease: str) -> None:
        """Return a slot whose chunk could not be prepared."""
        self.release(lease)

    def release(self, lease: str) -> object:
        """End a lease; returns its payload. KeyError when unknown or expired."""
        with self._lock:
            self._expire()
            held = self._leases.pop(lease)
            self._free.append(held.slot)
            return held.payload

    def lent(self) -> int:
        """Leases out now."""
        with self._lock:
            self._expire()
            return len(self._leases)

    def _expire(self) -> None:
        now = time.monotonic()
        for lease in [k for k, held in self._leases.items() if held.until <= now]:
            self._free.append(self._leases.pop(lease).slot)
