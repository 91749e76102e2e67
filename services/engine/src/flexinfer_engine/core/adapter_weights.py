"""Deterministic random LoRA adapters in PEFT's layout, for a generated reference model."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import save_file

from flexinfer_engine.core import peft
from flexinfer_engine.core.config import ModelConfig, read_config
from flexinfer_engine.core.lora import LoRAError, linear_shapes
from flexinfer_engine.core.model import DecoderLM

DEFAULT_TARGETS = ("qkv", "out", "fc_in", "fc_out")
"""Every linear of every block: the adapter visibly changes what the model writes."""

B_STD = 0.1
"""Spread of lora_B. PEFT starts B at zero (a no-op adapter); a test adapter must change
the output: 0.1 moves about half the next-token probability of the tiny preset, and
the text it samples stays letter-like."""


def _seed_for(name: str, rank: int, targets: Sequence[str], seed: int) -> int:
    text = f"flexinfer-lora:{name}:{rank}:{','.join(targets)}:{seed}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") & (2**63 - 1)


def random_adapter(
    config: ModelConfig, *, rank: int, targets: Sequence[str], seed: int
) -> dict[str, torch.Tensor]:
    """PEFT-named lora_A/lora_B tensors for every targeted linear of ``config``'s model."""
    adapter_config = peft.parse_config(
        {"r": rank, "lora_alpha": 1, "target_modules": list(targets)}, max_rank=rank
    )
    with torch.device("meta"):
        linears = linear_shapes(DecoderLM(config))
    generator = torch.Generator().manual_seed(seed)
    tensors: dict[str, torch.Tensor] = {}
    for module in sorted(peft.targeted_modules(adapter_config, linears)):
        shape = linears[module]
        a = torch.randn(rank, shape.in_features, generator=generator)
        b = torch.randn(shape.out_features, rank, generator=generator) * B_STD
        prefix = f"base_model.model.{module}"
        tensors[f"{prefix}.lora_A.weight"] = (a / math.sqrt(shape.in_features)).to(config.dtype)
        tensors[f"{prefix}.lora_B.weight"] = b.to(config.dtype).contiguous()
    return tensors


def generate_adapter(
    out_dir: Path,
    *,
    name: str,
    model_dir: Path,
    rank: int = 8,
    alpha: float = 16,
    targets: Sequence[str] = DEFAULT_TARGETS,
    seed: int = 0,
) -> Path:
    """Write a deterministic adapter for the model in ``model_dir`` into ``out_dir``:
    the same name, model, rank, targets and seed always give the same bytes."""
    if rank < 1:
        raise LoRAError(f"rank must be at least 1, not {rank}")
    if not math.isfinite(alpha) or alpha <= 0:
        raise LoRAError(f"alpha must be a positive number, not {alpha}")
    config = read_config(model_dir)
    tensors = random_adapter(
        config, rank=rank, targets=targets, seed=_seed_for(name, rank, targets, seed)
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    weights = out_dir / peft.WEIGHTS_FILE
    save_file(tensors, weights, metadata={"format": "pt"})
    weights.chmod(0o644)  # safetensors creates it owner-only; engines may run as another user
    base = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    adapter_config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base.get("flexinfer_name", model_dir.name),
        "r": rank,
        "lora_alpha": alpha,
        "lora_dropout": 0.0,
        "target_modules": list(targets),
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "use_dora": False,
        "modules_to_save": None,
        "inference_mode": True,
        "flexinfer_name": name,
        "flexinfer_seed": seed,
    }
    text = json.dumps(adapter_config, indent=2, sort_keys=True) + "\n"
    (out_dir / peft.CONFIG_FILE).write_text(text, encoding="utf-8")
    return out_dir
