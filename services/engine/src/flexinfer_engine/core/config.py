"""The model's architecture settings (HF-style config.json) and the size presets."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from flexinfer_common.errors import NotFoundError, PermanentError

ARCHITECTURE = "FlexInferForCausalLM"
MODEL_TYPE = "flexinfer-ref"

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of the reference decoder-only transformer."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int
    vocab_size: int = 259
    torch_dtype: str = "float32"
    layer_norm_eps: float = 1e-5
    bos_token_id: int = 256
    eos_token_id: int = 257
    pad_token_id: int = 258

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.hidden_size // self.num_attention_heads

    @property
    def dtype(self) -> torch.dtype:
        """The torch dtype the weights are stored in."""
        return _DTYPES[self.torch_dtype]

    def to_hf_dict(self) -> dict[str, Any]:
        """config.json content, HF layout."""
        return {"architectures": [ARCHITECTURE], "model_type": MODEL_TYPE, **asdict(self)}

    @classmethod
    def from_hf_dict(cls, data: dict[str, Any]) -> ModelConfig:
        """Parse config.json content, refusing other architectures."""
        if data.get("model_type") != MODEL_TYPE:
            raise PermanentError(
                f"config.json model_type is {data.get('model_type')!r}, expected {MODEL_TYPE!r}"
            )
        fields = cls.__dataclass_fields__
        try:
            config = cls(**{k: v for k, v in data.items() if k in fields})
        except TypeError as exc:
            raise PermanentError(f"config.json is incomplete: {exc}") from exc
        config.validate()
        return config

    def validate(self) -> None:
        """Refuse inconsistent shapes before any tensor is allocated."""
        if self.torch_dtype not in _DTYPES:
            raise PermanentError(f"unsupported torch_dtype {self.torch_dtype!r}")
        sizes = (
            self.hidden_size,
            self.num_hidden_layers,
            self.num_attention_heads,
            self.intermediate_size,
            self.max_position_embeddings,
        )
        if any(not isinstance(v, int) or v <= 0 for v in sizes):
            raise PermanentError("config.json sizes must be positive integers")
        if self.hidden_size % self.num_attention_heads:
            raise PermanentError("hidden_size must be divisible by num_attention_heads")
        if self.vocab_size != 259:
            raise PermanentError("vocab_size must be 259 (256 bytes + BOS/EOS/PAD)")


PRESETS: dict[str, ModelConfig] = {
    # ~0.9M parameters: loads in milliseconds, for tests.
    "tiny": ModelConfig(128, 4, 4, 512, 512),
    # ~10M parameters.
    "small": ModelConfig(320, 8, 5, 1280, 1024),
    # ~100M parameters, stored in bfloat16 (~200 MB).
    "medium": ModelConfig(768, 14, 12, 3072, 2048, torch_dtype="bfloat16"),
    # ~300M parameters, stored in bfloat16 (~600 MB): for load benchmarks.
    "large": ModelConfig(1024, 24, 16, 4096, 2048, torch_dtype="bfloat16"),
}


def parameter_count(config: ModelConfig) -> int:
    """Number of parameters of a model with this config."""
    h, i, v = config.hidden_size, config.intermediate_size, config.vocab_size
    per_layer = 4 * h  # two layer norms
    per_layer += 3 * h * h + 3 * h + h * h + h  # qkv and output projections
    per_layer += h * i + i + i * h + h  # MLP
    embeddings = v * h + config.max_position_embeddings * h
    return embeddings + config.num_hidden_layers * per_layer + 2 * h + v * h + v


def read_config(model_dir: Path) -> ModelConfig:
    """The ModelConfig in ``model_dir/config.json``."""
    path = model_dir / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise NotFoundError(f"{path} does not exist") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PermanentError(f"{path}: unreadable: {exc}") from exc
    if not isinstance(data, dict):
        raise PermanentError(f"{path}: not a JSON object")
    return ModelConfig.from_hf_dict(data)
