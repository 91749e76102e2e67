"""Tensor discovery: tied weights once, hidden tensors promoted, non-contiguous views,
and manifest mismatches."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from flexinfer_transfer import (
    ManifestMismatchError,
    adopt_hidden_tensors,
    check_manifest,
    discover_tensors,
)


class TiedLM(nn.Module):
    """Input embedding and output head share one weight."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(16, 4)
        self.head = nn.Linear(4, 16, bias=False)
        self.head.weight = self.embed.weight
        self.norm = nn.LayerNorm(4)
        self.register_buffer("positions", torch.arange(8))


class QuantConfig:
    """A plain object holding post-processed state, as a quant method does."""

    def __init__(self) -> None:
        self.a1_gscale = torch.full((2,), 0.5)
        self.nested = {"workspace": torch.zeros(3)}


class Stashing(nn.Module):
    """Stashes tensors where named_parameters()/named_buffers() cannot see them."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(2, 2)
        self.quant = QuantConfig()
        self.k_scale = torch.tensor(2.0)  # a bare tensor attribute


def test_tied_weights_are_listed_once_with_their_alias() -> None:
    entries = {e.name: e for e in discover_tensors(TiedLM())}
    assert sorted(entries) == ["embed.weight", "norm.bias", "norm.weight", "positions"]
    assert entries["embed.weight"].aliases == ["head.weight"]
    assert entries["embed.weight"].size == 16 * 4 * 4


def test_hidden_tensors_are_adopted_and_then_discovered() -> None:
    model = Stashing()
    before = {e.name for e in discover_tensors(model)}
    assert before == {"proj.weight", "proj.bias"}
    adopted = adopt_hidden_tensors(model)
    assert sorted(adopted) == [
        "k_scale",
        "quant__a1_gscale",
        "quant__nested__workspace",
    ]
    after = {e.name for e in discover_tensors(model)}
    assert after == before | set(adopted)
    # The plain object still sees the same tensor: a transfer into the buffer updates it.
    model.get_buffer("quant__a1_gscale").fill_(4.0)
    assert model.quant.a1_gscale.tolist() == [4.0, 4.0]
    assert float(model.get_buffer("k_scale")) == 2.0
    assert "k_scale" not in model.state_dict()  # non-persistent: checkpoints stay as they were
    assert adopt_hidden_tensors(model) == []  # idempotent


def test_non_contiguous_tensors_become_one_storage_view() -> None:
    model = nn.Module()
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    model.register_buffer("w_uv", base.t())  # non-contiguous views of one storage
    model.register_buffer("w_uk_t", base[:, :3].t())
    entries = discover_tensors(model)
    assert len(entries) == 1
    (entry,) = entries
    assert entry.storage_view
    assert entry.tensor.dtype == torch.uint8
    assert entry.size == 24 * 4
    assert sorted([entry.name, *entry.aliases]) == ["w_uk_t", "w_uv"]
    assert entry.tensor.data_ptr() == base.data_ptr()


def test_manifest_mismatch_names_the_differences() -> None:
    target = discover_tensors(TiedLM())
    source = [(e.name, e.size) for e in target]
    check_manifest(source, target)
    changed = [(n, s + 4 if n == "norm.bias" else s) for n, s in source if n != "positions"]
    changed.append(("extra.weight", 8))
    with pytest.raises(ManifestMismatchError) as info:
        check_manifest(changed, target)
    message = str(info.value)
    assert "missing ['positions']" in message
    assert "unexpected ['extra.weight']" in message
    assert "size differs ['norm.bias']" in message
