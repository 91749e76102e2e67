"""Small checkpoints for the quantizer's tests: the reference model and a Llama-style one.

The reference model comes from the engine's generator; the Llama-style one (rotary
attention with grouped KV heads, SwiGLU, a byte-level BPE tokenizer.json) is written here
with random weights, in the HF layout a hub download has.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load_file, save_file

from flexinfer_controller.quantize.gguf_vocab import byte_level_alphabet
from flexinfer_engine.core.weights import generate_model

LLAMA_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 80,  # not a multiple of 32: ffn_down rows cannot be Q8_0 blocks
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "vocab_size": 262,
    "bos_token_id": 258,
    "eos_token_id": 259,
    "hidden_act": "silu",
    "torch_dtype": "float16",
}
MERGES = ["Ġ t", "h e"]


def reference_model(directory: Path, *, zero_output_bias: bool = False) -> Path:
    """The engine's tiny reference model; ``zero_output_bias`` zeroes its lm_head.bias."""
    generate_model(directory, name="quantize-test")
    if zero_output_bias:
        tensors = load_file(directory / "model.safetensors")
        tensors["lm_head.bias"] = np.zeros_like(tensors["lm_head.bias"])
        save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})
    return directory


def _llama_tensors(rng: np.random.Generator) -> dict[str, np.ndarray[Any, Any]]:
    c = LLAMA_CONFIG
    h, ff, vocab = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    kv = h // c["num_attention_heads"] * c["num_key_value_heads"]
    shapes = {"model.embed_tokens.weight": (vocab, h), "model.norm.weight": (h,),
              "lm_head.weight": (vocab, h)}  # fmt: skip
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (h, h), p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, h),
            p + "mlp.gate_proj.weight": (ff, h), p + "mlp.up_proj.weight": (ff, h),
            p + "mlp.down_proj.weight": (h, ff),
        }  # fmt: skip
    return {
        name: (rng.standard_normal(shape) * (1.0 if len(shape) == 1 else 0.05)).astype(np.float16)
        for name, shape in shapes.items()
    }


def _tokenizer(directory: Path) -> None:
    vocab = {text: i for i, text in enumerate(byte_level_alphabet())}
    vocab |= {"Ġt": 256, "he": 257}
    added = [{"id": 258, "content": "<s>", "special": True},
             {"id": 259, "content": "</s>", "special": True}]  # fmt: skip
    tokenizer = {"model": {"type": "BPE", "vocab": vocab, "merges": MERGES},
                 "decoder": {"type": "ByteLevel"}, "added_tokens": added}  # fmt: skip
    (directory / "tokenizer.json").write_text(json.dumps(tokenizer), encoding="utf-8")
    config = {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True}
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")


def llama_model(directory: Path, *, seed: int = 0, shards: int = 1) -> Path:
    """A two-layer Llama-style checkpoint (float16), in ``shards`` files with an index."""
    directory.mkdir(parents=True, exist_ok=True)
    tensors = _llama_tensors(np.random.default_rng(seed))
    (directory / "config.json").write_text(json.dumps(LLAMA_CONFIG), encoding="utf-8")
    _tokenizer(directory)
    if shards == 1:
        save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})
        return directory
    names = sorted(tensors)
    weight_map: dict[str, str] = {}
    for index in range(shards):
        part = names[index::shards]
        file = f"model-{index + 1:05d}-of-{shards:05d}.safetensors"
        save_file({n: tensors[n] for n in part}, directory / file, metadata={"format": "pt"})
        weight_map |= dict.fromkeys(part, file)
    size = sum(t.nbytes for t in tensors.values())
    index_doc = {"metadata": {"total_size": size}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index_doc))
    return directory


def copy_model(source: Path, dest: Path) -> Path:
    """A copy of a checkpoint directory (a test changes the copy, not the shared one)."""
    shutil.copytree(source, dest)
    return dest
