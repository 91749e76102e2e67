"""FP8: the codec bit for bit against torch's float8_e4m3fn, and whole checkpoints as vLLM
reads them (compressed-tensors), dequantized back within FP8's rounding."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from flexinfer_controller.quantize import fp8
from flexinfer_controller.quantize.errors import UnsupportedError
from flexinfer_controller.quantize.request import build_request
from flexinfer_controller.quantize.run import run
from flexinfer_testing.quantize_models import llama_model, reference_model

LINEARS = ("attn.qkv.weight", "attn.out.weight", "fc_in.weight", "fc_out.weight")


def test_encode_matches_torch_bit_for_bit() -> None:
    values = torch.randn(200_000, generator=torch.Generator().manual_seed(1)) * 60
    edges = torch.tensor([0.0, -0.0, 448.0, -448.0, 2**-6, 2**-9, 2**-10, 3 * 2**-10, 1.0625,
                          1.1875, -1.1875, 17.0, 1e-12, 240.0, 232.0])  # fmt: skip
    every = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    finite = every[torch.isfinite(every)]
    midpoints = (finite[:-1] + finite[1:]) / 2  # ties: to the even code
    for x in (values, edges, finite, midpoints[finite[:-1] * finite[1:] > 0]):
        expected = x.to(torch.float8_e4m3fn).view(torch.uint8).numpy()
        assert np.array_equal(fp8.encode(x.numpy()), expected)


def test_decode_matches_torch_and_saturates() -> None:
    codes = np.arange(256, dtype=np.uint8)
    expected = torch.from_numpy(codes).view(torch.float8_e4m3fn).float().numpy()
    assert np.array_equal(fp8.decode(codes), expected, equal_nan=True)
    assert fp8.decode(fp8.encode(np.array([1e6, -1e6]))).tolist() == [448.0, -448.0]
    assert np.isnan(fp8.decode(fp8.encode(np.array([np.nan])))).all()


def _fp8_bound(weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    # 3 mantissa bits: half a step is 2**-4 of the value; below 2**-6, steps are 2**-9.
    return weight.abs() * 2**-4 + scale * 2**-10 + 1e-7


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_reference_model_in_fp8(tmp_path: Path, dtype: torch.dtype) -> None:
    source = reference_model(tmp_path / "ref")
    original = load_file(source / "model.safetensors")
    save_file({k: v.to(dtype) for k, v in original.items()}, source / "model.safetensors",
              metadata={"format": "pt"})  # fmt: skip
    original = {k: v.to(dtype).float() for k, v in original.items()}
    out = tmp_path / "ref-fp8"
    assert run(build_request("FP8", str(source), str(out), {}))
    converted = load_file(out / "model.safetensors")
    quantized = [k for k, v in converted.items() if v.dtype == torch.float8_e4m3fn]
    assert sorted(quantized) == sorted(f"layers.{i}.{n}" for i in range(4) for n in LINEARS)
    for name in quantized:
        scale = converted[f"{name}_scale"]
        assert scale.dtype == torch.float32
        assert scale.shape == (original[name].shape[0], 1)
        error = (converted[name].float() * scale - original[name]).abs()
        assert (error <= _fp8_bound(original[name], scale)).all(), name
    for name in set(original) - set(quantized):  # norms, biases, embeddings, lm_head
        assert converted[name].dtype == dtype
        assert torch.equal(converted[name].float(), original[name])
    config = json.loads((out / "config.json").read_text())
    qc = config["quantization_config"]
    assert qc["quant_method"] == "compressed-tensors"
    assert qc["format"] == "float-quantized"
    assert qc["ignore"] == ["embed_positions", "embed_tokens", "lm_head"]
    group = qc["config_groups"]["group_0"]
    assert group["targets"] == ["Linear"]
    assert group["weights"] == {"num_bits": 8, "type": "float", "symmetric": True,
                                "dynamic": False, "strategy": "channel"}  # fmt: skip
    assert group["input_activations"]["dynamic"] is True
    assert config["model_type"] == "flexinfer-ref"  # the rest of config.json is kept
    for name in ("generation_config.json", "tokenizer_config.json"):
        assert (out / name).read_bytes() == (source / name).read_bytes()


def test_per_tensor_scales_and_ignored_modules(tmp_path: Path) -> None:
    source = reference_model(tmp_path / "ref")
    out = tmp_path / "out"
    options = {"strategy": "tensor", "ignore": "layers.0.attn.qkv, layers.1.fc_in"}
    run(build_request("FP8", str(source), str(out), options))
    converted = load_file(out / "model.safetensors")
    original = load_file(source / "model.safetensors")
    assert converted["layers.0.attn.qkv.weight"].dtype == torch.float32
    assert converted["layers.1.fc_in.weight"].dtype == torch.float32
    scale = converted["layers.0.fc_out.weight_scale"]
    assert scale.shape == (1,)
    assert scale.item() == pytest.approx(original["layers.0.fc_out.weight"].abs().max() / 448)
    qc = json.loads((out / "config.json").read_text())["quantization_config"]
    assert "layers.0.attn.qkv" in qc["ignore"]
    assert qc["config_groups"]["group_0"]["weights"]["strategy"] == "tensor"


def test_a_sharded_checkpoint_keeps_its_shards_and_index(tmp_path: Path) -> None:
    source = llama_model(tmp_path / "llama", shards=2)
    out = tmp_path / "llama-fp8"
    run(build_request("FP8", str(source), str(out), {}))
    index = json.loads((out / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert files == sorted(p.name for p in source.glob("*.safetensors"))
    stored: dict[str, torch.Tensor] = {}
    for file in files:
        tensors = load_file(out / file)
        assert all(index["weight_map"][name] == file for name in tensors)
        stored |= tensors
    assert set(index["weight_map"]) == set(stored)
    assert index["metadata"]["total_size"] == sum(
        t.numel() * t.element_size() for t in stored.values()
    )
    assert stored["model.layers.1.mlp.down_proj.weight"].dtype == torch.float8_e4m3fn
    assert stored["model.embed_tokens.weight"].dtype == torch.float16
    assert (out / "tokenizer.json").is_file()


def test_refusals(tmp_path: Path) -> None:
    source = reference_model(tmp_path / "ref")
    with pytest.raises(UnsupportedError, match="no option bits"):
        run(build_request("FP8", str(source), str(tmp_path / "a"), {"bits": "4"}))
    with pytest.raises(UnsupportedError, match="strategy 'block'"):
        run(build_request("FP8", str(source), str(tmp_path / "b"), {"strategy": "block"}))
    out = tmp_path / "c"
    run(build_request("FP8", str(source), str(out), {}))
    with pytest.raises(UnsupportedError, match="already quantized"):
        run(build_request("FP8", str(out), str(tmp_path / "d"), {}))
    assert not (tmp_path / "a").exists()
    assert not (tmp_path / "d").exists()
