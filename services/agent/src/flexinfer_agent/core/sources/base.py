"""The one interface every discovery source implements, and helpers the parsers share."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

from flexinfer_agent.core.commands import BadOutputError
from flexinfer_agent.core.gpu import GPU
from flexinfer_agent.settings import DiscoverySettings


class GPUSource(Protocol):
    """One way of listing this machine's GPUs (a library, a vendor tool, sysfs)."""

    async def discover(self) -> list[GPU]:
        """The GPUs this source sees (empty: none); a DiscoveryError when it cannot tell."""
        ...


SourceFactory = Callable[[DiscoverySettings], GPUSource]
"""Builds a source from the discovery settings (tool paths, timeout)."""


def json_object(text: str, tool: str) -> dict[str, Any]:
    """The JSON object in ``text``, skipping lines a tool prints before it (warnings)."""
    start = text.find("{")
    if start < 0:
        raise BadOutputError(f"{tool} printed no JSON object")
    try:
        value = json.loads(text[start:])
    except ValueError as exc:
        raise BadOutputError(f"{tool} printed invalid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise BadOutputError(f"{tool} printed JSON that is not an object")
    return value


def integer(value: object, what: str, tool: str) -> int:
    """``value`` (an int or a decimal string) as an int; BadOutputError otherwise."""
    try:
        return int(str(value).strip())
    except ValueError:
        raise BadOutputError(f"{tool}: {what} is not a number: {str(value)[:40]!r}") from None
