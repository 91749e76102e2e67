"""The load strategy chain: priority order, fall-through with a log line and a metric,
target reinitialisation, the peer retry budget, and the POSIX file reader."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch
from prometheus_client import CollectorRegistry
from safetensors.torch import load_file, save_file
from torch import nn

from flexinfer_common.errors import NotFoundError, PermanentError
from flexinfer_transfer import (
    DEFAULT_ORDER,
    LoadContext,
    ReaderSettings,
    SelectionTarget,
    SourceCandidate,
    SourceSelector,
    StrategyParts,
    TransferMetrics,
    TransferSettings,
    create_selector,
    create_strategy_chain,
    read_safetensors,
)
from flexinfer_transfer.testing import LocalSource, LocalTransport, ModuleTarget


def _tensors() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(5)
    return {
        "w.bf16": torch.randn(33, 7, generator=gen).to(torch.bfloat16),
        "w.f32": torch.randn(5, 3, generator=gen),
        "i.i64": torch.arange(9, dtype=torch.int64),
        "b.bool": torch.tensor([True, False, True]),
        "u.u8": torch.arange(3, dtype=torch.uint8),
        "s.scalar": torch.tensor(1.5),
        "e.empty": torch.zeros(0, 4),
    }


def _assert_same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert sorted(got) == sorted(want)
    for key, tensor in want.items():
        assert got[key].dtype == tensor.dtype, key
        assert got[key].shape == tensor.shape, key
        assert torch.equal(got[key], tensor), key


def _parts(registry: CollectorRegistry, transport: LocalTransport | None = None) -> StrategyParts:
    return StrategyParts(
        TransferMetrics(registry), create_selector("rendezvous_hash"), ReaderSettings(), transport
    )


@pytest.mark.parametrize("threads", [1, 3])
def test_posix_reader_matches_safetensors(tmp_path: Path, threads: int) -> None:
    want = _tensors()
    save_file(want, tmp_path / "model.safetensors")
    settings = ReaderSettings(threads=threads, chunk_bytes=64, hugepages=threads > 1)
    got = read_safetensors([tmp_path / "model.safetensors"], settings)
    _assert_same(got, want)
    _assert_same(got, load_file(tmp_path / "model.safetensors"))
    # One private buffer per file: the views share it, and writing one changes no file.
    assert got["w.f32"].untyped_storage().data_ptr() == got["i.i64"].untyped_storage().data_ptr()
    got["w.f32"].zero_()
    _assert_same(load_file(tmp_path / "model.safetensors"), want)


def test_posix_reader_rejects_bad_files(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    save_file(_tensors(), path)
    path.write_bytes(path.read_bytes()[:-8])
    with pytest.raises(PermanentError, match="data_offsets"):
        read_safetensors([path], ReaderSettings())
    path.write_bytes(b"\xff" * 64)
    with pytest.raises(PermanentError, match="header length"):
        read_safetensors([path], ReaderSettings())


def test_default_order_uses_the_fast_reader_and_says_why_others_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    want = _tensors()
    save_file({k: v for k, v in want.items() if k.startswith("w")}, tmp_path / "a.safetensors")
    save_file({k: v for k, v in want.items() if not k.startswith("w")}, tmp_path / "b.safetensors")
    weight_map = {k: "a.safetensors" if k.startswith("w") else "b.safetensors" for k in want}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    registry = CollectorRegistry()
    chain = create_strategy_chain(DEFAULT_ORDER, _parts(registry))
    with caplog.at_level(logging.INFO):
        report = chain.run(LoadContext(tmp_path))
    assert report.strategy == "gds"
    assert report.source == str(tmp_path)
    _assert_same(report.tensors, want)
    skipped = dict(s.split(": ", 1) for s in report.skipped)
    assert skipped["rdma"] == "no peer transfer manager (NIXL) is configured"
    assert skipped["instanttensor"] == "instanttensor is not installed"
    assert skipped["fastsafetensors"] == "fastsafetensors is not installed"
    assert skipped["runai_streamer"] == "runai_model_streamer is not installed"
    records = [r for r in caplog.records if getattr(r, "strategy", None) == "rdma"]
    assert records
    assert getattr(records[0], "reason", None) == "unavailable"
    fallbacks = registry.get_sample_value(
        "mx_p2p_strategy_fallbacks_total", {"strategy": "rdma", "reason": "unavailable"}
    )
    assert fallbacks == 1
    assert registry.get_sample_value("mx_p2p_loads_total", {"strategy": "gds"}) == 1


def test_a_failing_strategy_falls_through_to_the_next(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    save_file(_tensors(), path)
    registry = CollectorRegistry()
    chain = create_strategy_chain(["gds", "default"], _parts(registry))
    # A file that shrinks is a failure of gds alone here: default then fails too, and the
    # chain reports both instead of aborting at the first.
    path.write_bytes(path.read_bytes()[:-8])
    with pytest.raises(PermanentError, match=r"gds: PermanentError.*default: PermanentError"):
        chain.run(LoadContext(tmp_path))
    assert (
        registry.get_sample_value(
            "mx_p2p_strategy_fallbacks_total", {"strategy": "gds", "reason": "failed"}
        )
        == 1
    )
    with pytest.raises(NotFoundError, match=r"no load strategy found weights.*does not exist"):
        chain.run(LoadContext(tmp_path / "empty-dir-that-is-missing"))


class Tiny(nn.Module):
    """A small model with a tied weight and a hidden scale."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(8, 4)
        self.head = nn.Linear(4, 8, bias=False)
        self.head.weight = self.embed.weight
        self.norm = nn.LayerNorm(4)


class Other(nn.Module):
    """A different architecture (a rolling update's other image version)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(9, 4)


def _source(name: str, module: nn.Module, fail_after: int | None = None) -> LocalSource:
    torch.manual_seed(sum(map(ord, name)))
    for p in module.parameters():
        nn.init.normal_(p)
    return LocalSource(SourceCandidate(name, "w0", accelerator="cpu"), module, fail_after)


def test_rdma_skips_stale_and_mismatched_sources_and_reinitialises(tmp_path: Path) -> None:
    good = _source("good", Tiny())
    sources = [_source("stale", Tiny(), fail_after=1), _source("old-image", Other()), good]
    target = ModuleTarget(Tiny, Tiny())
    transport = LocalTransport(sources, target)
    registry = CollectorRegistry()
    parts = StrategyParts(TransferMetrics(registry), _FixedOrder(), ReaderSettings(), transport)
    ctx = LoadContext(tmp_path, accelerator="cpu", target=target)
    report = create_strategy_chain(["rdma", "default"], parts).run(ctx)
    assert report.strategy == "rdma"
    assert report.source == "good/w0"
    assert transport.received_from == ["good/w0"]
    assert target.reinitialized == 1  # after the stale donor wrote a region; not after
    for key, value in good.module.state_dict().items():  # the mismatch, which wrote nothing
        assert torch.equal(target.module.state_dict()[key], value)
    assert (
        registry.get_sample_value("mx_p2p_source_failures_total", {"reason": "ConnectionError"})
        == 1
    )
    assert (
        registry.get_sample_value(
            "mx_p2p_source_failures_total", {"reason": "ManifestMismatchError"}
        )
        == 1
    )

    def pulls(outcome: str) -> float | None:
        labels = {"policy": "fixed", "outcome": outcome}
        return registry.get_sample_value("mx_p2p_transfer_seconds_count", labels)

    assert (pulls("retry"), pulls("success")) == (2, 1)  # one timing per source tried


def test_rdma_tries_at_most_three_sources_then_files(tmp_path: Path) -> None:
    tensors = {k: v.clone() for k, v in Tiny().state_dict().items() if k != "head.weight"}
    save_file(tensors, tmp_path / "model.safetensors")
    sources = [_source(f"s{i}", Tiny(), fail_after=0) for i in range(4)]
    other_rank = SourceCandidate("rank1", "w0", worker_rank=1, accelerator="cpu")
    other_family = SourceCandidate("xpu", "w0", accelerator="xpu")
    sources = [LocalSource(other_rank, Tiny()), LocalSource(other_family, Tiny()), *sources]
    target = ModuleTarget(Tiny, Tiny())
    transport = LocalTransport(sources, target)
    registry = CollectorRegistry()
    parts = StrategyParts(TransferMetrics(registry), _FixedOrder(), ReaderSettings(), transport)
    ctx = LoadContext(tmp_path, accelerator="cpu", target=target)
    report = create_strategy_chain(["rdma", "gds"], parts).run(ctx)
    assert report.strategy == "gds"
    assert "all 3 sources failed" in report.skipped[0]

    def tried(source: str) -> float | None:
        labels = {"policy": "fixed", "source": source}
        return registry.get_sample_value("mx_p2p_source_selections_total", labels)

    # Incompatible sources are filtered before the budget, so they cannot exhaust it.
    assert [tried(f"s{i}/w0") for i in range(4)] == [1, 1, 1, None]
    assert tried("rank1/w0") is None
    assert tried("xpu/w0") is None
    _assert_same(report.tensors, tensors)


class _FixedOrder(SourceSelector):
    """Keeps the listing's order, so a test decides which source is tried first."""

    name = "fixed"

    def order(
        self, candidates: Sequence[SourceCandidate], target: SelectionTarget
    ) -> list[SourceCandidate]:
        """The candidates as listed."""
        return list(candidates)


def test_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = TransferSettings()
    assert tuple(defaults.strategies) == DEFAULT_ORDER
    assert defaults.reader() == ReaderSettings(threads=2, chunk_bytes=16 << 20, hugepages=False)
    monkeypatch.setenv("FLEXINFER_TRANSFER_SELECTOR", "load_aware")
    monkeypatch.setenv("FLEXINFER_TRANSFER_READ_THREADS", "4")
    monkeypatch.setenv("FLEXINFER_TRANSFER_STRATEGIES", '["gds", "default"]')
    settings = TransferSettings()
    assert create_selector(settings.selector).name == "load_aware"
    assert settings.reader().threads == 4
    assert settings.strategies == ["gds", "default"]
