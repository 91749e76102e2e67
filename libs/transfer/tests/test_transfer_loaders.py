"""The loader interface and plain safetensors loading (single and sharded files)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from flexinfer_common.errors import (
    NotFoundError,
    PermanentError,
)
from flexinfer_transfer import (
    NotApplicableError,
    SafetensorsLoader,
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
