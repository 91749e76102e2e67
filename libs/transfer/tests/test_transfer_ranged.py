"""Tensor-parallel ranged reads: each rank reads only its shard's bytes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from prometheus_client import CollectorRegistry
from safetensors.torch import load_file, save_file

from flexinfer_common.errors import PermanentError
from flexinfer_transfer import (
    LoadContext,
    ReaderSettings,
    ShardSpec,
    StrategyParts,
    TransferMetrics,
    create_selector,
    create_strategy_chain,
    read_shard,
)

RULES = (("*.rows", 0), ("*.cols", 1), ("*.experts", 1))


def _checkpoint(root: Path) -> Path:
    gen = torch.Generator().manual_seed(11)
    tensors = {
        "layer.q.rows": torch.randn(64, 48, generator=gen).to(torch.bfloat16),
        "layer.o.cols": torch.randn(48, 64, generator=gen),
        "layer.moe.experts": torch.randn(3, 8, 40, generator=gen),
        "layer.norm": torch.randn(48, generator=gen),
    }
    path = root / "model.safetensors"
    save_file(tensors, path)
    return path


def test_two_ranks_read_half_each_and_match_a_sliced_full_load(tmp_path: Path) -> None:
    path = _checkpoint(tmp_path)
    full = load_file(path)
    total = sum(t.numel() * t.element_size() for t in full.values())
    replicated = full["layer.norm"].numel() * 4
    shards = [read_shard([path], ShardSpec(rank, 2, RULES)) for rank in range(2)]
    for rank, shard in enumerate(shards):
        assert shard.bytes_read == (total - replicated) // 2 + replicated
        assert 0.45 < shard.bytes_read / total < 0.55
        for name, tensor in full.items():
            dim = ShardSpec(rank, 2, RULES).split_dim(name)
            want = tensor if dim is None else tensor.chunk(2, dim)[rank]
            assert torch.equal(shard.tensors[name], want), name
            assert shard.tensors[name].is_contiguous()


def test_uneven_split_is_refused(tmp_path: Path) -> None:
    path = _checkpoint(tmp_path)
    with pytest.raises(PermanentError, match="cannot be split 5 ways"):
        read_shard([path], ShardSpec(0, 5, RULES))
    with pytest.raises(ValueError, match="rank 2"):
        ShardSpec(2, 2)


@pytest.mark.parametrize("strategy", ["gds", "default"])
def test_strategies_load_a_ranks_shard(tmp_path: Path, strategy: str) -> None:
    path = _checkpoint(tmp_path)
    full = load_file(path)
    parts = StrategyParts(
        TransferMetrics(CollectorRegistry()), create_selector("random"), ReaderSettings()
    )
    ctx = LoadContext(tmp_path, shard=ShardSpec(1, 2, RULES))
    report = create_strategy_chain([strategy], parts).run(ctx)
    assert torch.equal(report.tensors["layer.o.cols"], full["layer.o.cols"][:, 32:])
    assert torch.equal(report.tensors["layer.q.rows"], full["layer.q.rows"][32:])
    assert torch.equal(report.tensors["layer.norm"], full["layer.norm"])
