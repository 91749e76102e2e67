"""What the reference engine needs of a GPU: its weights plus its KV cache.

The engine (services/engine) keeps the weights in their stored dtype and preallocates, per
generation, keys and values of every layer to the full context: ``2 * layers * hidden *
max_position_embeddings`` elements in that dtype, for each of its concurrent generations
(``FLEXINFER_ENGINE_MAX_CONCURRENT_GENERATIONS``, 1 by default). The controller cannot
import the engine, so it reads the same config.json keys itself. Unreadable or foreign
files give no estimate (None): the Model is then placed as one of unknown size.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

MIB = 1024 * 1024
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")
CONCURRENT_GENERATIONS = 1
"""The engine's default; a Model that raises it should set ``gpu.vramEstimateMB``."""
_KV_KEYS = ("num_hidden_layers", "hidden_size", "max_position_embeddings")


def reference_vram_mb(model_dir: Path) -> int | None:
    """MiB for the weights in ``model_dir`` and the KV cache its config.json implies."""
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        weights = sum(
            f.stat().st_size
            for f in model_dir.iterdir()
            if f.is_file() and f.name.endswith(WEIGHT_SUFFIXES)
        )
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    kv = kv_cache_bytes(config) if isinstance(config, dict) else None
    if kv is None or weights == 0:
        return None
    return math.ceil((weights + kv) / MIB)


def kv_cache_bytes(config: dict[str, object]) -> int | None:
    """Bytes of the preallocated keys and values of the engine's concurrent generations."""
    sizes = [config.get(k) for k in _KV_KEYS]
    width = DTYPE_BYTES.get(str(config.get("torch_dtype", "float32")))
    if width is None or not all(isinstance(v, int) and v > 0 for v in sizes):
        return None
    layers, hidden, positions = (int(v) for v in sizes if isinstance(v, int))
    return 2 * layers * hidden * positions * width * CONCURRENT_GENERATIONS
