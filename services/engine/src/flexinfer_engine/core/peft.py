"""PEFT's on-disk LoRA format: adapter_config.json and adapter_model.safetensors.

Everything is checked against the engine's linear layers before a tensor is read: the
rank (against the engine's maximum), the target modules, each tensor's name and shape.
Features that would change the maths (DoRA, biases, per-module ranks) are refused, not
silently dropped.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from flexinfer_engine.core.lora import LinearShape, LoRAError, LoRAPair

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
MAX_CONFIG_BYTES = 1 << 20
"""adapter_config.json is a few hundred bytes; anything near a MiB is not one."""

ALL_LINEAR = "all-linear"
OUTPUT_LAYER = "lm_head"
_KEY = re.compile(r"^(?:base_model\.model\.)?(?P<module>.+)\.lora_(?P<half>[AB])\.weight$")
_UNSUPPORTED = {
    "use_dora": "DoRA (use_dora) is not supported.",
    "fan_in_fan_out": "fan_in_fan_out weights (Conv1D layout) are not supported.",
    "modules_to_save": "modules_to_save is not supported: only LoRA weights are loaded.",
    "rank_pattern": "per-module ranks (rank_pattern) are not supported.",
    "alpha_pattern": "per-module alphas (alpha_pattern) are not supported.",
}


@dataclass(frozen=True)
class PeftConfig:
    """The adapter_config.json fields the engine uses."""

    rank: int
    alpha: float
    target_modules: list[str] | str
    rslora: bool

    @property
    def scale(self) -> float:
        """PEFT's scaling: alpha / r, or alpha / sqrt(r) for rank-stabilised LoRA."""
        return self.alpha / (math.sqrt(self.rank) if self.rslora else self.rank)


def read_config(path: Path, max_rank: int) -> PeftConfig:
    """The validated adapter_config.json at ``path``."""
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise LoRAError(f"{CONFIG_FILE} is larger than {MAX_CONFIG_BYTES} bytes")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LoRAError(f"{CONFIG_FILE} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise LoRAError(f"{CONFIG_FILE} is not a JSON object")
    return parse_config(data, max_rank)


def parse_config(data: Mapping[str, Any], max_rank: int) -> PeftConfig:
    """A PeftConfig from adapter_config.json content; every problem in one message."""
    peft_type = data.get("peft_type", "LORA")
    if peft_type != "LORA":
        raise LoRAError(f"peft_type is {peft_type!r}: only LORA adapters are supported.")
    missing = sorted({"r", "lora_alpha", "target_modules"} - data.keys())
    if missing:
        raise LoRAError(f"Missing required configuration fields: {', '.join(missing)}")
    rank, alpha, targets = data["r"], data["lora_alpha"], data["target_modules"]
    problems = [msg for key, msg in _UNSUPPORTED.items() if data.get(key)]
    if data.get("bias", "none") != "none":
        problems.append("Adapter bias is not supported (bias must be 'none').")
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        problems.append(f"r must be a positive integer, not {rank!r}.")
    elif rank > max_rank:
        problems.append(f"LoRA rank {rank} is greater than max_lora_rank {max_rank}.")
    if not _is_number(alpha) or not math.isfinite(alpha) or alpha <= 0:
        problems.append(f"lora_alpha must be a positive number, not {alpha!r}.")
    if not _valid_targets(targets):
        problems.append("target_modules must be a non-empty list of names or a regex string.")
    if problems:
        raise LoRAError(" ".join(problems))
    return PeftConfig(rank, float(alpha), targets, bool(data.get("use_rslora", False)))


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _valid_targets(targets: object) -> bool:
    if isinstance(targets, str):
        return bool(targets)
    return (
        isinstance(targets, list)
        and bool(targets)
        and all(isinstance(t, str) and t for t in targets)
    )


def targeted_modules(config: PeftConfig, linears: Mapping[str, LinearShape]) -> set[str]:
    """The engine's linears the config targets (PEFT's rules: a list matches a module path
    or its dotted suffix, a string is a regex over the whole path, ``all-linear`` is every
    linear but the output layer)."""
    targets = config.target_modules
    if targets == ALL_LINEAR:
        return {name for name in linears if name != OUTPUT_LAYER}
    if isinstance(targets, str):
        try:
            pattern = re.compile(targets)
        except re.error as exc:
            raise LoRAError(f"target_modules is not a valid regex: {exc}") from exc
        chosen = {name for name in linears if pattern.fullmatch(name)}
        if not chosen:
            raise LoRAError(f"target_modules {targets!r} matches none of {_leaves(linears)}")
        return chosen
    unknown = [t for t in targets if not any(_suffix_match(name, t) for name in linears)]
    if unknown:
        raise LoRAError(
            f"Unknown target modules {unknown}: this engine's linear layers are {_leaves(linears)}."
        )
    return {name for name in linears if any(_suffix_match(name, t) for t in targets)}


def _suffix_match(name: str, target: str) -> bool:
    return name == target or name.endswith("." + target)


def _leaves(linears: Mapping[str, LinearShape]) -> list[str]:
    return sorted({name.rsplit(".", 1)[-1] for name in linears})


def read_pairs(
    path: Path,
    config: PeftConfig,
    linears: Mapping[str, LinearShape],
    device: torch.device,
    dtype: torch.dtype,
) -> dict[str, LoRAPair]:
    """The (A, B) pairs in adapter_model.safetensors, shapes checked before any is read."""
    targeted = targeted_modules(config, linears)
    try:
        with safe_open(str(path), framework="pt", device="cpu") as weights:
            halves = _plan(weights, config.rank, targeted, linears)
            tensors = {key: weights.get_tensor(key) for key in halves}
    except SafetensorError as exc:
        raise LoRAError(f"{WEIGHTS_FILE} is not a valid safetensors file: {exc}") from exc
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for key, (module, half) in halves.items():
        tensor = tensors[key]
        if not tensor.is_floating_point() or not bool(torch.isfinite(tensor).all()):
            raise LoRAError(f"{key}: weights must be finite floating-point numbers")
        pairs.setdefault(module, {})[half] = tensor.to(device=device, dtype=dtype)
    return {module: LoRAPair(ab["A"], ab["B"]) for module, ab in sorted(pairs.items())}


def _plan(
    weights: Any, rank: int, targeted: set[str], linears: Mapping[str, LinearShape]
) -> dict[str, tuple[str, str]]:
    """Each tensor key -> (module, "A" or "B"), after checking names, targets and shapes."""
    halves: dict[str, tuple[str, str]] = {}
    for key in sorted(weights.keys()):
        match = _KEY.match(key)
        if match is None:
            raise LoRAError(f"{WEIGHTS_FILE}: unexpected tensor {key!r} (only lora_A/lora_B)")
        module, half = match["module"], match["half"]
        shape = linears.get(module)
        if shape is None:
            raise LoRAError(f"{WEIGHTS_FILE}: {key!r} names no linear layer of this model")
        if module not in targeted:
            raise LoRAError(f"{WEIGHTS_FILE}: {key!r} is outside the config's target_modules")
        want = [rank, shape.in_features] if half == "A" else [shape.out_features, rank]
        got = list(weights.get_slice(key).get_shape())
        if got != want:
            raise LoRAError(f"{WEIGHTS_FILE}: {key} has shape {got}, expected {want}")
        if (module, half) in halves.values():
            raise LoRAError(f"{WEIGHTS_FILE}: lora_{half} of {module} appears twice")
        halves[key] = (module, half)
    if not halves:
        raise LoRAError(f"{WEIGHTS_FILE} holds no LoRA weights")
    seen: dict[str, set[str]] = {}
    for module, half in halves.values():
        seen.setdefault(module, set()).add(half)
    lonely = sorted(m for m, h in seen.items() if h != {"A", "B"})
    if lonely:
        raise LoRAError(f"{WEIGHTS_FILE}: {lonely} lack a lora_A or lora_B weight")
    return halves
