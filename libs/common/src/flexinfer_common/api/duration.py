"""Go-style durations ("300s", "5m", "1h30m", "250ms"), as Kubernetes manifests write them."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema

_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|us|µs|ns|h|m|s)")
_MAX_SECONDS = 10 * 365 * 24 * 3600.0


def parse_duration(value: str | float | int | timedelta) -> timedelta:
    """Parse a Go duration string (or seconds as a number) into a timedelta."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool):
        raise ValueError("a duration must be a string such as '5m' or a number of seconds")
    elif isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _parse_text(value.strip())
    else:
        raise ValueError("a duration must be a string such as '5m' or a number of seconds")
    if seconds < 0 or seconds > _MAX_SECONDS:
        raise ValueError(f"duration {value!r} is out of range (0 to 10 years)")
    return timedelta(seconds=seconds)


def _parse_text(text: str) -> float:
    if text in ("0", ""):
        if text == "":
            raise ValueError("empty duration")
        return 0.0
    pos, total = 0, 0.0
    for match in _PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text):
        raise ValueError(f"invalid duration {text!r}: use forms like '300s', '5m' or '1h30m'")
    return total


def format_duration(value: timedelta) -> str:
    """Format a timedelta the way Go's time.Duration.String() would, e.g. '5m0s'."""
    total_ms = round(value.total_seconds() * 1000)
    if total_ms == 0:
        return "0s"
    if total_ms < 1000:
        return f"{total_ms}ms"
    hours, rest_ms = divmod(total_ms, 3_600_000)
    minutes, rest_ms = divmod(rest_ms, 60_000)
    seconds = rest_ms / 1000
    sec_text = f"{seconds:.3f}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{sec_text}"
    if minutes:
        return f"{minutes}m{sec_text}"
    return sec_text


def _validate(value: Any) -> timedelta:
    return parse_duration(value)


Duration = Annotated[
    timedelta,
    BeforeValidator(_validate),
    PlainSerializer(format_duration, return_type=str, when_used="always"),
    WithJsonSchema({"type": "string", "pattern": r"^([0-9]+(\.[0-9]*)?(ms|us|µs|ns|h|m|s))+$|^0$"}),
]
"""A duration field: accepts Go strings or seconds, serialises to a Go string."""
