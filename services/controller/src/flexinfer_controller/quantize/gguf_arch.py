"""How each supported HF architecture maps onto a llama.cpp architecture.

llama.cpp loads a GGUF file only when it holds exactly the tensors its graph for
``general.architecture`` creates, under its names, with the hyperparameters it reads: a
mapping names each tensor, transforms those whose layout differs, and writes the keys.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from flexinfer_controller.quantize.errors import UnsupportedError
from flexinfer_controller.quantize.gguf_vocab import add_bpe_vocab, add_byte_vocab

Array = np.ndarray[Any, np.dtype[np.float32]]


@dataclass(frozen=True)
class Mapping:
    """One HF architecture's way into GGUF."""

    arch: str
    """llama.cpp's architecture name (``general.architecture``)."""
    rename: Callable[[str], str | None]
    """The GGUF name of an HF tensor; None: not stored (a buffer llama.cpp recomputes)."""
    transform: Callable[[str, Array, dict[str, Any]], Array]
    """The tensor as llama.cpp lays it out (most pass through unchanged)."""
    metadata: Callable[[gguf.GGUFWriter, dict[str, Any]], None]
    vocab: Callable[[gguf.GGUFWriter, Path, dict[str, Any]], None]


def _renamer(
    table: dict[str, str], layer: re.Pattern[str], skip: tuple[str, ...] = ()
) -> Callable[[str], str | None]:
    def rename(name: str) -> str | None:
        if name.endswith(skip):
            return None
        if name in table:
            return table[name]
        match = layer.fullmatch(name)
        if match and match["part"] in table:
            return f"blk.{match['index']}.{table[match['part']]}"
        raise UnsupportedError(f"tensor {name!r} has no place in llama.cpp's layout")

    return rename


def _keep(name: str, tensor: Array, config: dict[str, Any]) -> Array:
    return tensor


# The reference model (FlexInferForCausalLM) is GPT-2's block: learned positions, LayerNorms
# with biases, one fused QKV projection, a GELU MLP: llama.cpp's "gpt2" graph.
_REF_TABLE = {
    "embed_tokens.weight": "token_embd.weight",
    "embed_positions.weight": "position_embd.weight",
    "norm.weight": "output_norm.weight",
    "norm.bias": "output_norm.bias",
    "lm_head.weight": "output.weight",
    **{f"{hf}.{kind}": f"{gg}.{kind}" for hf, gg in (
        ("ln_1", "attn_norm"), ("attn.qkv", "attn_qkv"), ("attn.out", "attn_output"),
        ("ln_2", "ffn_norm"), ("fc_in", "ffn_up"), ("fc_out", "ffn_down"),
    ) for kind in ("weight", "bias")},
}  # fmt: skip
_REF_LAYER = re.compile(r"layers\.(?P<index>\d+)\.(?P<part>.+)")


def _reference_rename(name: str) -> str | None:
    if name == "lm_head.bias":
        return None  # _reference_transform refused it unless it is all zeros
    return _renamer(_REF_TABLE, _REF_LAYER)(name)


def check_output_bias(name: str, tensor: Array) -> None:
    """llama.cpp's gpt2 graph has no output bias: only an all-zero one can be left out."""
    if name == "lm_head.bias" and np.any(tensor != 0):
        raise UnsupportedError(
            "the model's lm_head.bias is not zero, and llama.cpp's gpt2 graph (the reference "
            "model's block) has no output bias: dropping it would change every logit; "
            "serve this model as safetensors or FP8 instead"
        )


def _gpt2_metadata(writer: gguf.GGUFWriter, config: dict[str, Any]) -> None:
    writer.add_context_length(int(config["max_position_embeddings"]))
    writer.add_embedding_length(int(config["hidden_size"]))
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_block_count(int(config["num_hidden_layers"]))
    writer.add_head_count(int(config["num_attention_heads"]))
    writer.add_layer_norm_eps(float(config.get("layer_norm_eps", 1e-5)))
    writer.add_vocab_size(int(config["vocab_size"]))


def _byte_vocab(writer: gguf.GGUFWriter, directory: Path, config: dict[str, Any]) -> None:
    add_byte_vocab(writer, directory, config)


# Llama-style decoders (Llama, Mistral): RMSNorm, rotary positions, SwiGLU.
_LLAMA_TABLE = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
_LLAMA_LAYER = re.compile(r"model\.layers\.(?P<index>\d+)\.(?P<part>.+)")


def _heads(config: dict[str, Any]) -> tuple[int, int]:
    heads = int(config["num_attention_heads"])
    return heads, int(config.get("num_key_value_heads") or heads)


def rotary_to_interleaved(tensor: Array, heads: int) -> Array:
    """HF rotates the two halves of each head; GGML rotates adjacent pairs: reorder rows."""
    rows = tensor.shape[0]
    split = tensor.reshape(heads, 2, rows // heads // 2, *tensor.shape[1:])
    return split.swapaxes(1, 2).reshape(tensor.shape)


def _llama_transform(name: str, tensor: Array, config: dict[str, Any]) -> Array:
    heads, kv_heads = _heads(config)
    if name.endswith("self_attn.q_proj.weight"):
        return rotary_to_interleaved(tensor, heads)
    if name.endswith("self_attn.k_proj.weight"):
        return rotary_to_interleaved(tensor, kv_heads)
    return tensor


def _llama_metadata(writer: gguf.GGUFWriter, config: dict[str, Any]) -> None:
    if config.get("rope_scaling"):
        raise UnsupportedError("rope_scaling is not converted to GGUF by the built-in quantizer")
    heads, kv_heads = _heads(config)
    head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
    writer.add_context_length(int(config["max_position_embeddings"]))
    writer.add_embedding_length(int(config["hidden_size"]))
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_block_count(int(config["num_hidden_layers"]))
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_rms_eps(float(config.get("rms_norm_eps", 1e-5)))
    writer.add_rope_freq_base(float(config.get("rope_theta", 10000.0)))
    writer.add_rope_dimension_count(head_dim)
    writer.add_vocab_size(int(config["vocab_size"]))


def _bpe_vocab(writer: gguf.GGUFWriter, directory: Path, config: dict[str, Any]) -> None:
    add_bpe_vocab(writer, directory, int(config["vocab_size"]))


def _llama_checked(config: dict[str, Any]) -> None:
    if config.get("attention_bias") or config.get("mlp_bias"):
        raise UnsupportedError("Llama layers with biases are not converted to GGUF")
    if config.get("hidden_act", "silu") != "silu":
        raise UnsupportedError(f"hidden_act {config['hidden_act']!r}: llama.cpp's llama is SiLU")


def _reference_transform(name: str, tensor: Array, config: dict[str, Any]) -> Array:
    check_output_bias(name, tensor)
    return tensor


REFERENCE = Mapping("gpt2", _reference_rename, _reference_transform, _gpt2_metadata, _byte_vocab)
LLAMA = Mapping(
    "llama",
    _renamer(_LLAMA_TABLE, _LLAMA_LAYER, skip=("rotary_emb.inv_freq",)),
    _llama_transform,
    _llama_metadata,
    _bpe_vocab,
)
MAPPINGS = {
    "FlexInferForCausalLM": REFERENCE,
    "LlamaForCausalLM": LLAMA,
    "MistralForCausalLM": LLAMA,
}
"""HF ``architectures[0]`` -> its mapping."""


def mapping_for(architecture: str, config: dict[str, Any]) -> Mapping:
    """The mapping of ``architecture``; UnsupportedError names the ones there are."""
    mapping = MAPPINGS.get(architecture)
    if mapping is None:
        known = ", ".join(sorted(MAPPINGS))
        raise UnsupportedError(
            f"GGUF conversion of {architecture or 'an unnamed architecture'} is not built in "
            f"(known: {known}); give spec.quantize.image a converter that has it"
        )
    if mapping is LLAMA:
        _llama_checked(config)
    return mapping
