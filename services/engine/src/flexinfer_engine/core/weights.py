"""Deterministic random weights for the reference model, readable thanks to a unigram prior."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import torch
from safetensors.torch import save_file

from flexinfer_common.errors import ConfigError
from flexinfer_engine.core.config import PRESETS, ModelConfig, parameter_count
from flexinfer_engine.core.model import DecoderLM
from flexinfer_engine.core.tokenizer import BOS, CHAT_TEMPLATE, EOS, PAD, SPECIAL_TOKENS

# Relative frequencies of English letters (percent), for the lm_head bias prior.
_LETTERS = {
    "e": 12.7,
    "t": 9.1,
    "a": 8.2,
    "o": 7.5,
    "i": 7.0,
    "n": 6.7,
    "s": 6.3,
    "h": 6.1,
    "r": 6.0,
    "d": 4.3,
    "l": 4.0,
    "c": 2.8,
    "u": 2.8,
    "m": 2.4,
    "w": 2.4,
    "f": 2.2,
    "g": 2.0,
    "y": 2.0,
    "p": 1.9,
    "b": 1.5,
    "v": 1.0,
    "k": 0.8,
    "j": 0.15,
    "x": 0.15,
    "q": 0.1,
    "z": 0.07,
}
_OTHERS = {" ": 18.0, ".": 1.0, ",": 1.0, "\n": 0.3, "'": 0.2, "?": 0.1, "!": 0.1, "-": 0.2}


def unigram_log_prior() -> torch.Tensor:
    """Log-probabilities per token: letters, spaces and punctuation likely, the rest rare."""
    weights = torch.full((len(SPECIAL_TOKENS) + 256,), 1e-4)
    for byte in range(32, 127):
        weights[byte] = 0.01  # other printable ASCII: possible but uncommon
    for char in "0123456789":
        weights[ord(char)] = 0.05
    for letter, freq in _LETTERS.items():
        weights[ord(letter)] = freq * 0.75
        weights[ord(letter.upper())] = freq * 0.05
    for char, freq in _OTHERS.items():
        weights[ord(char)] = freq
    for byte in list(range(32)) + list(range(127, 256)):
        if byte != ord("\n"):
            weights[byte] = 1e-7  # control bytes and lone UTF-8 bytes: almost never
    weights[EOS] = 1e-7
    weights[BOS] = weights[PAD] = 1e-9
    return (weights / weights.sum()).log()


def _seed_for(name: str, preset: str, seed: int) -> int:
    digest = hashlib.sha256(f"flexinfer-ref:{name}:{preset}:{seed}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & (2**63 - 1)


def random_state_dict(config: ModelConfig, seed: int) -> dict[str, torch.Tensor]:
    """Deterministic weights: small normal init, unit layer norms, the unigram lm_head bias."""
    generator = torch.Generator().manual_seed(seed)
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in DecoderLM(config).state_dict().items()}
    out_std = 0.02 / math.sqrt(2 * config.num_hidden_layers)
    tensors: dict[str, torch.Tensor] = {}
    for key, shape in shapes.items():
        if key.endswith(("ln_1.weight", "ln_2.weight", "norm.weight")):
            tensor = torch.ones(shape)
        elif key == "lm_head.bias":
            tensor = unigram_log_prior()
        elif key.endswith(".bias"):
            tensor = torch.zeros(shape)
        else:
            std = 0.02
            if key.endswith(("attn.out.weight", "fc_out.weight")):
                std = out_std
            elif key == "embed_tokens.weight":
                # Token identity must survive the random blocks, or every position looks
                # alike and greedy decoding repeats one letter.
                std = 1.0
            elif key == "lm_head.weight":
                # Large enough that the context moves the argmax: greedy text is not one
                # letter repeated, yet the prior still dominates what is likely.
                std = 1.5 / math.sqrt(config.hidden_size)
            tensor = torch.randn(shape, generator=generator) * std
        tensors[key] = tensor.to(config.dtype).contiguous()
    return tensors


def _write_json(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def generate_model(out_dir: Path, *, name: str, preset: str = "tiny", seed: int = 0) -> Path:
    """Write a deterministic model (config, weights, tokenizer files) into ``out_dir``."""
    config = PRESETS.get(preset)
    if config is None:
        raise ConfigError(f"unknown preset {preset!r} (known: {', '.join(PRESETS)})")
    out_dir.mkdir(parents=True, exist_ok=True)
    tensors = random_state_dict(config, _seed_for(name, preset, seed))
    weights = out_dir / "model.safetensors"
    save_file(tensors, weights, metadata={"format": "pt"})
    weights.chmod(0o644)  # safetensors creates it owner-only; engines may run as another user
    _write_json(
        out_dir / "config.json",
        {
            **config.to_hf_dict(),
            "flexinfer_name": name,
            "flexinfer_preset": preset,
            "flexinfer_seed": seed,
            "num_parameters": parameter_count(config),
        },
    )
    _write_json(
        out_dir / "generation_config.json",
        {
            "bos_token_id": BOS,
            "eos_token_id": EOS,
            "pad_token_id": PAD,
            "do_sample": True,
            "temperature": 1.0,
            "top_p": 1.0,
        },
    )
    _write_json(
        out_dir / "tokenizer_config.json",
        {
            "tokenizer_class": "FlexInferByteTokenizer",
            "bos_token": SPECIAL_TOKENS[BOS],
            "eos_token": SPECIAL_TOKENS[EOS],
            "pad_token": SPECIAL_TOKENS[PAD],
            "model_max_length": config.max_position_embeddings,
            "chat_template": CHAT_TEMPLATE,
        },
    )
    return out_dir
