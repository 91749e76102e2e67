"""The load strategy interface: a way of getting a model's weights into a target, asked
first whether it applies (``is_available``) and then to ``load``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import torch

from flexinfer_transfer.sharding import ShardSpec


@dataclass(frozen=True)
class Availability:
    """Whether a strategy applies to a context, and why not when it does not."""

    available: bool
    reason: str = ""

    @classmethod
    def yes(cls) -> Availability:
        """The strategy applies."""
        return cls(True)

    @classmethod
    def no(cls, reason: str) -> Availability:
        """The strategy does not apply, for ``reason``."""
        return cls(False, reason)


class LoadTarget(Protocol):
    """The engine side a strategy may write into (the model's live tensors)."""

    def reinitialize(self) -> None:
        """Replace a possibly half-written model with a fresh instance."""


@dataclass
class LoadContext:
    """Everything a strategy may need for one load; strategies read only what they use."""

    model_dir: Path
    device: str = "cpu"
    accelerator: str = ""
    """This worker's accelerator family (``cuda``, ``xpu``, ``cpu``); empty = unknown."""
    worker_rank: int = 0
    worker_id: str = ""
    model_name: str = ""
    source_id: str = ""
    """The ``mx_source_id`` whose weights this worker needs; empty: any source of
    ``model_name`` (the manifest check still rejects one of another shape)."""
    quantization: str = ""
    dtype: str = ""
    shard: ShardSpec | None = None
    """This rank's tensor-parallel slice; None loads every tensor whole."""
    target: LoadTarget | None = None
    target_mutated: bool = field(default=False)
    """Set by a strategy before it writes into ``target``; cleared by reinitialisation."""

    def reset_target(self) -> bool:
        """Reinitialise the target when a failed try may have written into it."""
        if not self.target_mutated or self.target is None:
            return False
        self.target.reinitialize()
        self.target_mutated = False
        return True


@dataclass(frozen=True)
class LoadResult:
    """What a strategy loaded, and from where (a peer's id, a directory)."""

    tensors: dict[str, torch.Tensor]
    source: str


class LoadStrategy(ABC):
    """One way of loading weights (peer memory, a fast file reader, plain safetensors)."""

    name: str
    """Registry name, used in logs, metrics and load reports."""

    @abstractmethod
    def is_available(self, ctx: LoadContext) -> Availability:
        """Whether this strategy can run here (packages, devices, configuration)."""

    @abstractmethod
    def load(self, ctx: LoadContext) -> LoadResult:
        """The weights; raises a FlexInferError (or anything) when it fails."""
