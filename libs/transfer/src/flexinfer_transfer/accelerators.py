"""Accelerator compatibility: may a source's bytes be copied into this worker?

One rule for tensor sources and artifacts, before and after fetching metadata:
- the same family is always compatible (both sides post-process identically);
- across families only unquantized weights, only for the source types and family pairs
  allowlisted below: post-processing repacks quantized weights into kernel- and
  vendor-specific layouts, so their bytes would transfer fine and infer wrongly;
- an unknown (empty) accelerator is deferred before the fetch (the listing may omit it)
  but fails closed after it for quantized weights;
- undeclared quantization counts as quantized, so the gate fails closed by default.
"""

from __future__ import annotations

from enum import Enum

MX_SOURCE_TYPE_WEIGHTS = 0

HETEROGENEOUS_NIXL_SOURCE_TYPES = frozenset({MX_SOURCE_TYPE_WEIGHTS})
"""Source types that may cross families (LoRA waits for a tested transfer path)."""
HETEROGENEOUS_NIXL_WEIGHT_PAIRS = frozenset({("cuda", "xpu"), ("xpu", "cuda")})
"""(source, target) family pairs whose runtimes register each other's memory."""

_QUANTIZED_DTYPE_MARKERS = ("fp8", "float8", "fp4", "int4", "int8", "nf4", "mxfp", "uint4")


class Unset(Enum):
    """The caller did not declare the identity's quantization or dtype."""

    UNSET = "unset"


UNSET = Unset.UNSET


def family(accelerator: str) -> str:
    """``cuda:0`` / ``CUDA`` -> ``cuda``; empty stays empty (unknown)."""
    return accelerator.strip().lower().split(":", 1)[0]


def is_quantized(quantization: str | Unset | None, dtype: str | Unset | None) -> bool:
    """True unless both are declared and say plain tensor bytes."""
    if quantization is UNSET or dtype is UNSET:
        return True
    if (quantization or "").strip().lower() not in ("", "none"):
        return True
    return any(marker in (dtype or "").lower() for marker in _QUANTIZED_DTYPE_MARKERS)


def accelerators_compatible(
    source: str,
    target: str,
    *,
    post_fetch: bool,
    mx_source_type: int | None = None,
    quantization: str | Unset | None = UNSET,
    dtype: str | Unset | None = UNSET,
) -> bool:
    """Whether ``source``'s bytes may be copied into a ``target`` worker (module docstring)."""
    src, dst = family(source), family(target)
    quantized = is_quantized(quantization, dtype)
    if not src or not dst:
        return not (post_fetch and quantized)
    if src == dst:
        return True
    return (
        mx_source_type in HETEROGENEOUS_NIXL_SOURCE_TYPES
        and (src, dst) in HETEROGENEOUS_NIXL_WEIGHT_PAIRS
        and not quantized
    )
