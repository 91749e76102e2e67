"""GGUF: files read back with gguf's own reader: llama.cpp's tensor names, types and
hyperparameters, a complete tokenizer, and values within the type's rounding."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
from safetensors.numpy import load_file

from flexinfer_controller.quantize.errors import UnsupportedError
from flexinfer_controller.quantize.gguf_vocab import byte_level_alphabet
from flexinfer_controller.quantize.request import build_request
from flexinfer_controller.quantize.run import run
from flexinfer_testing.quantize_models import LLAMA_CONFIG, MERGES, llama_model, reference_model

Q8_0 = gguf.GGMLQuantizationType.Q8_0
F16 = gguf.GGMLQuantizationType.F16
F32 = gguf.GGMLQuantizationType.F32


def _convert(source: Path, out: Path, **options: str) -> gguf.GGUFReader:
    assert run(build_request("GGUF", str(source), str(out), options))
    return gguf.GGUFReader(out / "model.gguf")


def _field(reader: gguf.GGUFReader, key: str) -> Any:
    field = reader.get_field(key)
    assert field is not None, key
    return field.contents()


def _values(tensor: Any) -> np.ndarray[Any, Any]:
    data = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
    return np.asarray(data, dtype=np.float32).reshape([int(n) for n in reversed(tensor.shape)])


def _within(actual: np.ndarray[Any, Any], expected: np.ndarray[Any, Any], qtype: Any) -> bool:
    if qtype == F32:
        return bool(np.array_equal(actual, expected))
    if qtype == F16:
        return bool(np.allclose(actual, expected, rtol=2**-10, atol=1e-7))
    # Q8_0: per block of 32, d = max|x| / 127 and x ≈ d * round(x / d); d itself is f16.
    blocks = expected.reshape(-1, 32)
    step = np.abs(blocks).max(axis=1, keepdims=True) / 127
    error = np.abs(actual.reshape(-1, 32) - blocks)
    return bool((error <= step * 0.5 * 1.01 + np.abs(blocks) * 2**-10 + 1e-7).all())


def test_the_reference_model_as_gpt2(tmp_path: Path) -> None:
    source = reference_model(tmp_path / "ref", zero_output_bias=True)
    reader = _convert(source, tmp_path / "ref-gguf")
    assert _field(reader, "general.architecture") == "gpt2"
    assert _field(reader, "general.file_type") == gguf.LlamaFileType.MOSTLY_Q8_0
    assert _field(reader, "gpt2.block_count") == 4
    assert _field(reader, "gpt2.context_length") == 512
    assert _field(reader, "gpt2.embedding_length") == 128
    assert _field(reader, "gpt2.feed_forward_length") == 512
    assert _field(reader, "gpt2.attention.head_count") == 4
    tokens = _field(reader, "tokenizer.ggml.tokens")
    assert tokens[:256] == byte_level_alphabet()
    assert tokens[256:] == ["<|bos|>", "<|eos|>", "<|pad|>"]
    assert (tokens[ord("a")], tokens[ord(" ")]) == ("a", "Ġ")
    assert _field(reader, "tokenizer.ggml.model") == "gpt2"
    assert _field(reader, "tokenizer.ggml.merges") == ["<|bos|> <|eos|>"]
    assert _field(reader, "tokenizer.ggml.eos_token_id") == 257
    original = load_file(source / "model.safetensors")
    names = {t.name: t for t in reader.tensors}
    expected = {"token_embd.weight", "position_embd.weight", "output_norm.weight",
                "output_norm.bias", "output.weight"}  # fmt: skip
    for i in range(4):
        for part in ("attn_norm", "attn_qkv", "attn_output", "ffn_norm", "ffn_up", "ffn_down"):
            expected |= {f"blk.{i}.{part}.weight", f"blk.{i}.{part}.bias"}
    assert set(names) == expected  # exactly what llama.cpp's gpt2 graph creates
    pairs = {"token_embd.weight": "embed_tokens.weight", "output.weight": "lm_head.weight",
             "blk.2.attn_qkv.weight": "layers.2.attn.qkv.weight",
             "blk.3.ffn_down.weight": "layers.3.fc_out.weight",
             "blk.1.attn_norm.bias": "layers.1.ln_1.bias",
             "output_norm.weight": "norm.weight"}  # fmt: skip
    for gguf_name, hf_name in pairs.items():
        tensor = names[gguf_name]
        want = F32 if original[hf_name].ndim == 1 else Q8_0
        assert tensor.tensor_type == want, gguf_name
        assert _within(_values(tensor), original[hf_name], want), gguf_name


def test_the_reference_model_with_its_output_bias_is_refused(tmp_path: Path) -> None:
    source = reference_model(tmp_path / "ref")
    with pytest.raises(UnsupportedError, match=r"lm_head\.bias is not zero"):
        run(build_request("GGUF", str(source), str(tmp_path / "out"), {}))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ref"]  # nothing half-written


@pytest.mark.parametrize(("type_name", "matrix"), [("Q8_0", Q8_0), ("F16", F16), ("F32", F32)])
def test_a_llama_model(tmp_path: Path, type_name: str, matrix: Any) -> None:
    source = llama_model(tmp_path / "llama", shards=2)
    reader = _convert(source, tmp_path / "out", type=type_name.lower())
    assert _field(reader, "general.architecture") == "llama"
    assert _field(reader, "llama.attention.head_count") == 4
    assert _field(reader, "llama.attention.head_count_kv") == 2
    assert _field(reader, "llama.rope.dimension_count") == 16
    assert _field(reader, "llama.feed_forward_length") == 80
    assert _field(reader, "tokenizer.ggml.merges") == MERGES
    assert _field(reader, "tokenizer.ggml.bos_token_id") == 258
    tokens = _field(reader, "tokenizer.ggml.tokens")
    assert len(tokens) == LLAMA_CONFIG["vocab_size"]
    assert tokens[256:] == ["Ġt", "he", "<s>", "</s>", "[PAD260]", "[PAD261]"]
    original: dict[str, np.ndarray[Any, Any]] = {}
    for file in source.glob("*.safetensors"):
        original |= {k: v.astype(np.float32) for k, v in load_file(file).items()}
    names = {t.name: t for t in reader.tensors}
    assert len(names) == len(original)
    down = names["blk.1.ffn_down.weight"]  # rows of 80: no whole Q8_0 blocks, so F16
    assert down.tensor_type == (F16 if matrix == Q8_0 else matrix)
    gate = names["blk.0.ffn_gate.weight"]
    assert gate.tensor_type == matrix
    assert _within(_values(gate), original["model.layers.0.mlp.gate_proj.weight"], matrix)
    assert names["blk.0.attn_norm.weight"].tensor_type == F32


def test_llama_queries_and_keys_are_reordered_for_ggml_rotary(tmp_path: Path) -> None:
    source = llama_model(tmp_path / "llama")
    reader = _convert(source, tmp_path / "out", type="F32")
    original = load_file(source / "model.safetensors")
    names = {t.name: t for t in reader.tensors}
    for proj, heads in (("q", 4), ("k", 2)):
        hf = original[f"model.layers.0.self_attn.{proj}_proj.weight"].astype(np.float32)
        ggml = _values(names[f"blk.0.attn_{proj}.weight"])
        half = 16 // 2
        for head in range(heads):
            base = head * 16
            for i in range(half):  # HF rotates (i, i + half); GGML rotates (2i, 2i + 1)
                assert np.array_equal(ggml[base + 2 * i], hf[base + i])
                assert np.array_equal(ggml[base + 2 * i + 1], hf[base + i + half])


def test_gguf_refusals(tmp_path: Path) -> None:
    source = llama_model(tmp_path / "llama")
    with pytest.raises(UnsupportedError, match="type 'Q4_K'"):
        run(build_request("GGUF", str(source), str(tmp_path / "a"), {"type": "q4_k"}))
    (source / "tokenizer.json").unlink()
    (source / "tokenizer.model").write_bytes(b"\0")
    with pytest.raises(UnsupportedError, match="SentencePiece"):
        run(build_request("GGUF", str(source), str(tmp_path / "b"), {}))
    config = (source / "config.json").read_text().replace("LlamaForCausalLM", "BertModel")
    (source / "config.json").write_text(config)
    with pytest.raises(UnsupportedError, match=r"BertModel is not built in.*spec\.quantize\.image"):
        run(build_request("GGUF", str(source), str(tmp_path / "c"), {}))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["llama"]
