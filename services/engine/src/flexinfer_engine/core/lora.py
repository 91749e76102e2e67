"""LoRA adapters in memory and their per-row application: ``y = W x + scale * B (A x)``.

The base weights are never touched: an adapter is a set of small (A, B) pairs kept beside
the model, and a LoRABatch says which adapter (or none) each row of a forward pass uses,
so the base model and several adapters can share one batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F  # noqa: N812 (the usual alias)
from torch import nn

from flexinfer_common.errors import ConfigError, NotFoundError


class LoRAError(ConfigError):
    """An adapter that cannot be loaded (HTTP 400); ``kind`` is vLLM's error type."""

    kind = "BadRequestError"


class LoRAInputError(LoRAError):
    """A load/unload request that is itself wrong: empty or taken name (vLLM's 400)."""

    kind = "InvalidUserInput"


class LoRANotFoundError(NotFoundError):
    """No adapter at the path, or no loaded adapter of that name (HTTP 404)."""

    kind = "NotFoundError"


@dataclass(frozen=True)
class LinearShape:
    """An nn.Linear an adapter may target: ``in_features`` -> ``out_features``."""

    in_features: int
    out_features: int


@dataclass(frozen=True)
class LoRAPair:
    """The low-rank update of one linear: A (rank, in) and B (out, rank)."""

    a: torch.Tensor
    b: torch.Tensor


@dataclass(frozen=True)
class Adapter:
    """A loaded adapter: name, where it came from, rank, scale and its pairs by module."""

    name: str
    path: str
    """The lora_path it was loaded from, as the client gave it (vLLM's ``root``)."""
    rank: int
    scale: float
    pairs: Mapping[str, LoRAPair]
    created: int = 0
    """Epoch seconds of the load (the model card's ``created``)."""

    def to(self, device: torch.device) -> Adapter:
        """The same adapter with its tensors on ``device``."""
        pairs = {k: LoRAPair(p.a.to(device), p.b.to(device)) for k, p in self.pairs.items()}
        return replace(self, pairs=pairs)

    def nbytes(self) -> int:
        """Bytes its tensors occupy."""
        return sum(t.numel() * t.element_size() for p in self.pairs.values() for t in (p.a, p.b))


def linear_shapes(model: nn.Module) -> dict[str, LinearShape]:
    """Every nn.Linear of ``model`` by module path (``layers.0.attn.qkv``): the targets."""
    return {
        name: LinearShape(module.in_features, module.out_features)
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear)
    }


class LoRABatch:
    """Which adapter each row of a batch uses (None: the base model alone)."""

    def __init__(self, rows: Sequence[Adapter | None], device: torch.device) -> None:
        groups: dict[int, tuple[Adapter, list[int]]] = {}
        for row, adapter in enumerate(rows):
            if adapter is not None:
                groups.setdefault(id(adapter), (adapter, []))[1].append(row)
        self._groups: list[tuple[Adapter, torch.Tensor | None]] = []
        for adapter, members in groups.values():
            # A batch of one adapter, the usual case, needs no gather and scatter.
            index = None if len(members) == len(rows) else torch.tensor(members, device=device)
            self._groups.append((adapter, index))

    @classmethod
    def of(cls, rows: Sequence[Adapter | None], device: torch.device) -> LoRABatch | None:
        """A LoRABatch, or None when no row uses an adapter (the plain base path)."""
        return cls(rows, device) if any(a is not None for a in rows) else None

    def apply(self, module: str, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``y`` (the base linear's output for ``x``) plus each row's adapter update."""
        for adapter, index in self._groups:
            pair = adapter.pairs.get(module)
            if pair is None:
                continue
            if index is None:
                y = y + adapter.scale * F.linear(F.linear(x, pair.a), pair.b)
            else:
                delta = adapter.scale * F.linear(F.linear(x[index], pair.a), pair.b)
                y = y.index_add(0, index, delta)
        return y


def lora_linear(
    linear: nn.Linear, name: str, x: torch.Tensor, lora: LoRABatch | None
) -> torch.Tensor:
    """``linear(x)`` with the batch's adapters added on top (the base weights untouched)."""
    y: torch.Tensor = linear(x)
    return y if lora is None else lora.apply(name, x, y)
