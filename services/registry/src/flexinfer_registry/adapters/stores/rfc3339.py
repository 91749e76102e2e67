"""Unix seconds <-> fixed-width RFC 3339 UTC text, as the Redis and Kubernetes stores keep them.

Nine fractional digits (nanoseconds) make the text round-trip a float timestamp exactly
(a float near 2e9 has ~2.4e-7 s resolution), and the fixed width makes string order equal
time order, which the Redis Lua scripts rely on to compare timestamps without parsing.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

_NANO = Decimal("1e-9")
_FORMAT = "%Y-%m-%dT%H:%M:%S"


def format_ts(seconds: float) -> str:
    """``seconds`` since the epoch as ``YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ``."""
    exact = Decimal(seconds).quantize(_NANO, rounding=ROUND_HALF_EVEN)
    whole = int(exact.to_integral_value(rounding="ROUND_FLOOR"))
    nanos = int((exact - whole) / _NANO)
    stamp = datetime.fromtimestamp(whole, UTC).strftime(_FORMAT)
    return f"{stamp}.{nanos:09d}Z"


def parse_ts(text: str) -> float:
    """The inverse of :func:`format_ts`; also accepts RFC 3339 with any fraction or offset."""
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    main, _, rest = value.partition(".")
    fraction = "0"
    if rest:
        digits = len(rest) - len(rest.lstrip("0123456789"))
        fraction, value = rest[:digits] or "0", main + rest[digits:]
    try:
        parsed = datetime.fromisoformat(value)
        whole = Decimal(int(parsed.timestamp()))
        return float(whole + Decimal(f"0.{fraction}"))
    except (ValueError, InvalidOperation) as exc:
        raise ValueError(f"not an RFC 3339 timestamp: {text!r}") from exc
