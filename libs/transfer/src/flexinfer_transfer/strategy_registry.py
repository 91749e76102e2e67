"""Load strategies by name, and the chain built from names (the seed's priority order)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from flexinfer_common.errors import ConfigError
from flexinfer_transfer.default_strategy import DefaultStrategy
from flexinfer_transfer.fastsafetensors_strategy import FastSafetensorsStrategy
from flexinfer_transfer.gds_strategy import GdsStrategy
from flexinfer_transfer.instanttensor_strategy import InstantTensorStrategy, WeightIter
from flexinfer_transfer.metrics import TransferMetrics
from flexinfer_transfer.modelstreamer_strategy import ModelStreamerStrategy
from flexinfer_transfer.peer import PeerTransport
from flexinfer_transfer.posix_reader import ReaderSettings
from flexinfer_transfer.rdma_strategy import RdmaStrategy
from flexinfer_transfer.selector import SourceSelector
from flexinfer_transfer.strategy import LoadStrategy
from flexinfer_transfer.strategy_chain import LoadStrategyChain

DEFAULT_ORDER = ("rdma", "instanttensor", "fastsafetensors", "runai_streamer", "gds", "default")
"""Fastest source first: peer memory, then engine/library fast paths, then plain files."""


@dataclass(frozen=True)
class StrategyParts:
    """What strategy factories may use, built once by the composition root."""

    metrics: TransferMetrics
    selector: SourceSelector
    reader: ReaderSettings
    transport: PeerTransport | None = None
    instanttensor_iter: WeightIter | None = None


StrategyFactory = Callable[[StrategyParts], LoadStrategy]


def default_strategies() -> dict[str, StrategyFactory]:
    """The shipped strategies, by name (a fresh dict: callers may extend it)."""
    return {
        "rdma": lambda p: RdmaStrategy(p.transport, p.selector, p.metrics),
        "instanttensor": lambda p: InstantTensorStrategy(p.instanttensor_iter),
        "fastsafetensors": lambda p: FastSafetensorsStrategy(),
        "runai_streamer": lambda p: ModelStreamerStrategy(),
        "gds": lambda p: GdsStrategy(p.reader),
        "default": lambda p: DefaultStrategy(),
    }


def create_strategy_chain(
    names: Sequence[str],
    parts: StrategyParts,
    registry: Mapping[str, StrategyFactory] | None = None,
) -> LoadStrategyChain:
    """A chain of the named strategies, in the given order."""
    factories = default_strategies() if registry is None else registry
    if not names:
        raise ConfigError("the load strategy chain needs at least one strategy name")
    unknown = [name for name in names if name not in factories]
    if unknown:
        known = ", ".join(sorted(factories))
        raise ConfigError(f"unknown load strategy {unknown[0]!r} (known: {known})")
    return LoadStrategyChain([factories[name](parts) for name in names], parts.metrics)
