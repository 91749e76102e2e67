"""float8_e4m3fn (the FP8 vLLM's kernels read) in numpy: encode with round-to-nearest-even.

e4m3fn: 1 sign, 4 exponent (bias 7) and 3 mantissa bits; no infinities, 0x7F/0xFF are
NaN, the largest finite value is 448. numpy has no such type, so codes are uint8.
"""

from __future__ import annotations

from typing import Any

import numpy as np

MAX = 448.0
"""The largest finite e4m3fn value."""
_MIN_NORMAL_EXP = -6
_NAN = 0x7F


def _positive_values() -> np.ndarray[Any, np.dtype[np.float64]]:
    """The value of each code 0x00..0x7E (0x7F is NaN), ascending."""
    codes = np.arange(_NAN)
    exponent, mantissa = codes >> 3, (codes & 7).astype(np.float64)
    subnormal = mantissa / 8 * 2.0**_MIN_NORMAL_EXP
    normal = (1 + mantissa / 8) * 2.0 ** (exponent - 7)
    return np.where(exponent == 0, subnormal, normal)


_VALUES = _positive_values()


def encode(x: np.ndarray[Any, Any]) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """e4m3fn codes of ``x``: nearest value (ties to even), saturated at ±448; NaN stays NaN."""
    wide = np.asarray(x, dtype=np.float64)
    magnitude = np.minimum(np.abs(wide), MAX)
    _, exp2 = np.frexp(magnitude)  # magnitude = m * 2**exp2 with m in [0.5, 1)
    # The spacing of representable values: 2**(e-3) in binade 2**e, 2**-9 below 2**-6.
    spacing = np.ldexp(1.0, np.maximum(exp2 - 1, _MIN_NORMAL_EXP) - 3)
    rounded = np.minimum(np.rint(magnitude / spacing) * spacing, MAX)
    codes = np.searchsorted(_VALUES, np.nan_to_num(rounded)).astype(np.uint8)
    codes = np.where(np.signbit(wide), codes | 0x80, codes)
    return np.where(np.isnan(wide), np.uint8(_NAN), codes).astype(np.uint8)


def decode(codes: np.ndarray[Any, Any]) -> np.ndarray[Any, np.dtype[np.float32]]:
    """The float32 values of e4m3fn ``codes``."""
    codes = np.asarray(codes, dtype=np.uint8)
    table = np.append(_VALUES, np.nan).astype(np.float32)
    values = table[codes & 0x7F]
    signed: np.ndarray[Any, np.dtype[np.float32]] = np.where(codes & 0x80, -values, values)
    return signed.astype(np.float32)


def quantize_weight(
    weight: np.ndarray[Any, np.dtype[np.float32]], per_channel: bool
) -> tuple[np.ndarray[Any, np.dtype[np.uint8]], np.ndarray[Any, np.dtype[np.float32]]]:
    """A 2-D weight as codes and float32 scales (``weight ≈ decode(codes) * scale``).

    Per channel: one scale per output row, shape (rows, 1); else one, shape (1,). A row of
    zeros gets scale 1 so that nothing divides by zero.
    """
    if not np.isfinite(weight).all():
        raise ValueError("the weight holds NaN or infinite values")
    if per_channel:
        amax = np.abs(weight).max(axis=1, keepdims=True)
    else:
        amax = np.abs(weight).max(keepdims=True).reshape(1)
    scale = np.where(amax > 0, amax / MAX, 1.0).astype(np.float32)
    divisor = scale if per_channel else scale[0]
    return encode(weight / divisor), scale
