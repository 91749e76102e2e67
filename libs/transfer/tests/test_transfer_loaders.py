"""Loader interface, plain safetensors loading (single and sharded), chain and registry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from flexinfer_common.errors import (
    ConfigError,
    NotFoundError,
    PermanentError,
    TemporaryError,
)
from flexinfer_transfer import (
    LoaderChain,
    NotApplicableError,
    SafetensorsLoader,
    WeightLoader,
    create_loader_chain,
    default_loaders,
)


def _tensors() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return {
        "a.weight": torch.randn(4, 3, generator=gen),
        "b.bias": torch.arange(5, dtype=torch.int64),
        "c.half": torch.randn(2, 2, generator=gen).to(torch.bfloat16),
    }


def _assert_same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert sorted(got) == sorted(want)
    for key, tensor in want.items():
        assert got[key].dtype == tensor.dtype
        assert torch.equal(got[key], tensor)


def test_single_file(tmp_path: Path) -> None:
    want = _tensors()
    save_file(want, tmp_path / "model.safetensors", metadata={"format": "pt"})
    _assert_same(SafetensorsLoader().load(tmp_path, "cpu"), want)


def _write_sharded(root: Path, want: dict[str, torch.Tensor]) -> None:
    save_file({"a.weight": want["a.weight"]}, root / "model-00001-of-00002.safetensors")
    rest = {"b.bias": want["b.bias"], "c.half": want["c.half"]}
    save_file(rest, root / "model-00002-of-00002.safetensors")
    weight_map = {
        "a.weight": "model-00001-of-00002.safetensors",
        "b.bias": "model-00002-of-00002.safetensors",
        "c.half": "model-00002-of-00002.safetensors",
    }
    (root / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )


def test_sharded(tmp_path: Path) -> None:
    want = _tensors()
    _write_sharded(tmp_path, want)
    _assert_same(SafetensorsLoader().load(tmp_path, "cpu"), want)


def test_sharded_missing_shard_names_the_path(tmp_path: Path) -> None:
    _write_sharded(tmp_path, _tensors())
    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(NotFoundError, match=r"model-00002-of-00002\.safetensors") as info:
        SafetensorsLoader().load(tmp_path, "cpu")
    assert not isinstance(info.value, NotApplicableError)


def test_sharded_index_escaping_the_directory_is_refused(tmp_path: Path) -> None:
    model = tmp_path / "m"
    model.mkdir()
    save_file(_tensors(), tmp_path / "outside.safetensors")
    index = {"weight_map": {"a.weight": "../outside.safetensors"}}
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(PermanentError, match="outside the model directory"):
        SafetensorsLoader().load(model, "cpu")


def test_sharded_index_missing_tensor(tmp_path: Path) -> None:
    save_file({"x": torch.zeros(1)}, tmp_path / "s1.safetensors")
    index = {"weight_map": {"x": "s1.safetensors", "y": "s1.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(PermanentError, match="'y'"):
        SafetensorsLoader().load(tmp_path, "cpu")


@pytest.mark.parametrize(
    "content", ["not json", "[]", '{"weight_map": {}}', '{"weight_map": {"a": 1}}']
)
def test_bad_index(tmp_path: Path, content: str) -> None:
    (tmp_path / "model.safetensors.index.json").write_text(content)
    with pytest.raises(PermanentError, match="index"):
        SafetensorsLoader().load(tmp_path, "cpu")


def test_missing_directory_is_not_found_with_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(NotFoundError, match=str(missing)):
        SafetensorsLoader().load(missing, "cpu")


def test_empty_directory_is_not_applicable(tmp_path: Path) -> None:
    with pytest.raises(NotApplicableError, match=r"model\.safetensors"):
        SafetensorsLoader().load(tmp_path, "cpu")


@pytest.mark.parametrize(
    "content", [b"", b"\x08\x00\x00\x00\x00\x00\x00\x00{garbage", b"\xff" * 64]
)
def test_corrupt_file_is_permanent(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "model.safetensors").write_bytes(content)
    with pytest.raises(PermanentError, match=r"model\.safetensors"):
        SafetensorsLoader().load(tmp_path, "cpu")


def test_truncated_file_is_permanent(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    save_file(_tensors(), path)
    path.write_bytes(path.read_bytes()[:-8])
    with pytest.raises(PermanentError):
        SafetensorsLoader().load(tmp_path, "cpu")


class _Scripted(WeightLoader):
    """A strategy whose outcome the test decides, to exercise the chain's fallback rules."""

    def __init__(self, name: str, outcome: Exception | None) -> None:
        self.name = name
        self.outcome = outcome
        self.calls = 0

    def load(self, model_dir: Path, device: str) -> dict[str, torch.Tensor]:
        self.calls += 1
        if self.outcome is not None:
            raise self.outcome
        return {"from": torch.tensor([len(self.name)])}


def test_chain_falls_back_on_not_applicable_and_temporary(tmp_path: Path) -> None:
    save_file(_tensors(), tmp_path / "model.safetensors")
    first = _Scripted("p2p", NotApplicableError("no peer"))
    second = _Scripted("cache", TemporaryError("cache busy"))
    chain = LoaderChain([first, second, SafetensorsLoader()])
    report = chain.load_report(tmp_path, "cpu")
    assert report.strategy == "safetensors"
    assert report.skipped == ["p2p: no peer", "cache: cache busy"]
    assert report.seconds >= 0
    _assert_same(report.tensors, _tensors())
    assert chain.name == "chain(p2p,cache,safetensors)"


def test_chain_stops_on_permanent_error(tmp_path: Path) -> None:
    broken = _Scripted("broken", PermanentError("corrupt"))
    after = _Scripted("after", None)
    with pytest.raises(PermanentError, match="corrupt"):
        LoaderChain([broken, after]).load(tmp_path, "cpu")
    assert after.calls == 0


def test_chain_all_not_applicable_is_not_found(tmp_path: Path) -> None:
    chain = LoaderChain([_Scripted("x", NotApplicableError("nothing"))])
    with pytest.raises(NotFoundError, match="x: nothing"):
        chain.load(tmp_path, "cpu")


def test_chain_last_temporary_stays_temporary(tmp_path: Path) -> None:
    chain = LoaderChain([_Scripted("x", TemporaryError("later", delay=7.0))])
    with pytest.raises(TemporaryError) as info:
        chain.load(tmp_path, "cpu")
    assert info.value.delay == 7.0


def test_registry(tmp_path: Path) -> None:
    save_file(_tensors(), tmp_path / "model.safetensors")
    chain = create_loader_chain(["safetensors"])
    _assert_same(chain.load(tmp_path, "cpu"), _tensors())
    registry = default_loaders()
    registry["fake"] = lambda: _Scripted("fake", NotApplicableError("n/a"))
    chain = create_loader_chain(["fake", "safetensors"], registry)
    assert chain.load_report(tmp_path, "cpu").strategy == "safetensors"
    with pytest.raises(ConfigError, match="unknown loader strategy 'nixl'"):
        create_loader_chain(["nixl"])
    with pytest.raises(ConfigError):
        create_loader_chain([])
