"""JSON encoding of bus payloads, shared by the bus implementations."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def encode_payload(payload: Mapping[str, Any]) -> str:
    """The JSON text of a payload; ValueError for anything that is not a JSON object."""
    if not isinstance(payload, Mapping):
        raise ValueError("a bus payload must be a JSON object (a mapping)")
    try:
        return json.dumps(dict(payload), separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"bus payload is not JSON-serialisable: {exc}") from exc


def decode_payload(text: object) -> dict[str, Any] | None:
    """The JSON object in ``text``, or None when it is missing, not JSON or not an object."""
    if not isinstance(text, str | bytes):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
