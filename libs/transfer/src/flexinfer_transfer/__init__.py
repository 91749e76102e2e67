"""FlexInfer weight loading: tensor manifests, the load strategy chain, source selection."""

from flexinfer_transfer.accelerators import accelerators_compatible
from flexinfer_transfer.discovery import (
    ManifestEntry,
    adopt_hidden_tensors,
    check_manifest,
    discover_tensors,
)
from flexinfer_transfer.errors import ManifestMismatchError, SourceTransferError
from flexinfer_transfer.loader import NotApplicableError, WeightLoader
from flexinfer_transfer.metrics import TransferMetrics
from flexinfer_transfer.peer import PeerTransport
from flexinfer_transfer.posix_reader import ReaderSettings, read_safetensors
from flexinfer_transfer.ranged_reader import ShardRead, read_shard
from flexinfer_transfer.safetensors_loader import SafetensorsLoader
from flexinfer_transfer.selector import SelectionTarget, SourceCandidate, SourceSelector
from flexinfer_transfer.selector_registry import create_selector, default_selectors
from flexinfer_transfer.settings import TransferSettings
from flexinfer_transfer.sharding import ShardSpec
from flexinfer_transfer.strategy import (
    Availability,
    LoadContext,
    LoadResult,
    LoadStrategy,
    LoadTarget,
)
from flexinfer_transfer.strategy_chain import LoadReport, LoadStrategyChain
from flexinfer_transfer.strategy_registry import (
    DEFAULT_ORDER,
    StrategyParts,
    create_strategy_chain,
    default_strategies,
)

__all__ = [
    "DEFAULT_ORDER",
    "Availability",
    "LoadContext",
    "LoadReport",
    "LoadResult",
    "LoadStrategy",
    "LoadStrategyChain",
    "LoadTarget",
    "ManifestEntry",
    "ManifestMismatchError",
    "NotApplicableError",
    "PeerTransport",
    "ReaderSettings",
    "SafetensorsLoader",
    "SelectionTarget",
    "ShardRead",
    "ShardSpec",
    "SourceCandidate",
    "SourceSelector",
    "SourceTransferError",
    "StrategyParts",
    "TransferMetrics",
    "TransferSettings",
    "WeightLoader",
    "accelerators_compatible",
    "adopt_hidden_tensors",
    "check_manifest",
    "create_selector",
    "create_strategy_chain",
    "default_selectors",
    "default_strategies",
    "discover_tensors",
    "read_safetensors",
    "read_shard",
]
