"""AdapterLoader: an engine (through its EngineAdapter) loaded by the strategy chain. A peer
pull writes into a skeleton the engine built; a half-written skeleton is replaced; a file
load never builds one; the engine adopts and post-processes whatever won."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from prometheus_client import CollectorRegistry
from safetensors.torch import save_file
from torch import nn

from flexinfer_transfer import (
    ReaderSettings,
    SourceCandidate,
    StrategyParts,
    TransferMetrics,
    create_strategy_chain,
)
from flexinfer_transfer.adapter_loader import AdapterLoader, AdapterTarget
from flexinfer_transfer.engine_adapter import EngineAdapter
from flexinfer_transfer.selector import SelectionTarget, SourceSelector
from flexinfer_transfer.strategy import LoadContext
from flexinfer_transfer.testing import LocalSource, LocalTransport


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)


def seeded(seed: int) -> Tiny:
    torch.manual_seed(seed)
    return Tiny()


class TinyEngine:
    """An engine whose model starts on the meta device, as the reference engine's does."""

    def __init__(self) -> None:
        with torch.device("meta"):
            self.model = Tiny()
        self.calls: list[str] = []

    def build_skeleton(self) -> nn.Module:
        self.calls.append("build_skeleton")
        self.model = self.model.to("meta").to_empty(device="cpu")
        return self.model

    def apply_weights(self, tensors: dict[str, torch.Tensor]) -> None:
        self.calls.append("apply_weights")
        self.model.load_state_dict(tensors, strict=True, assign=True)

    def post_process(self) -> None:
        self.calls.append("post_process")
        self.model.eval()


class _Listed(SourceSelector):
    """The listing's order, so a test decides which source is tried first."""

    name = "listed"

    def order(
        self, candidates: Sequence[SourceCandidate], target: SelectionTarget
    ) -> list[SourceCandidate]:
        """The candidates as listed."""
        return list(candidates)


def _loader(tmp_path: Path, sources: list[LocalSource]) -> AdapterLoader:
    target = AdapterTarget()
    transport = LocalTransport(sources, target)
    metrics = TransferMetrics(CollectorRegistry())
    parts = StrategyParts(metrics, _Listed(), ReaderSettings(), transport)
    chain = create_strategy_chain(["rdma", "default"], parts)
    return AdapterLoader(chain, target, LoadContext(tmp_path, accelerator="cpu"))


def _source(name: str, seed: int, fail_after: int | None = None) -> LocalSource:
    return LocalSource(SourceCandidate(name, "w0", accelerator="cpu"), seeded(seed), fail_after)


def _same(module: nn.Module, want: nn.Module) -> None:
    got = module.state_dict()
    for key, value in want.state_dict().items():
        assert torch.equal(got[key], value), key


def test_a_peer_writes_into_the_engines_own_skeleton(tmp_path: Path) -> None:
    good = _source("good", 1)
    loader = _loader(tmp_path, [good])
    engine: EngineAdapter = (tiny := TinyEngine())
    report = loader.load(engine)
    assert report.strategy == "rdma"
    assert report.source == "good/w0"
    assert tiny.calls == ["build_skeleton", "apply_weights", "post_process"]
    _same(tiny.model, good.module)
    assert not tiny.model.training
    assert loader.target.adapter is None  # nothing held between loads


def test_a_donor_dying_mid_copy_gets_a_fresh_skeleton_for_the_next(tmp_path: Path) -> None:
    dying, good = _source("dying", 2, fail_after=1), _source("good", 3)
    loader = _loader(tmp_path, [dying, good])
    tiny = TinyEngine()
    report = loader.load(tiny)
    assert report.strategy == "rdma"
    assert report.source == "good/w0"
    assert tiny.calls.count("build_skeleton") == 2  # the half-written one was dropped
    assert loader.target.builds == 2
    _same(tiny.model, good.module)


def test_every_peer_failing_falls_back_to_files(tmp_path: Path) -> None:
    files = seeded(4)
    save_file(dict(files.state_dict()), tmp_path / "model.safetensors")
    loader = _loader(tmp_path, [_source("dying", 5, fail_after=1)])
    tiny = TinyEngine()
    report = loader.load(tiny)
    assert report.strategy == "default"
    assert "SourceTransferError" in report.skipped[0]
    assert tiny.calls == ["build_skeleton", "apply_weights", "post_process"]
    _same(tiny.model, files)


def test_a_file_load_never_builds_a_skeleton(tmp_path: Path) -> None:
    files = seeded(6)
    save_file(dict(files.state_dict()), tmp_path / "model.safetensors")
    loader = _loader(tmp_path, [])
    tiny = TinyEngine()
    report = loader.load(tiny)
    assert report.strategy == "default"
    assert report.skipped == ["rdma: NotApplicableError: no compatible READY source for rank 0"]
    assert tiny.calls == ["apply_weights", "post_process"]
    assert loader.target.builds == 0
    _same(tiny.model, files)
