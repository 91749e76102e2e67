"""Resolve spec.source to a local model directory (the local runtime's cache step)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from urllib.parse import unquote, urlsplit


class SourceState(StrEnum):
    """Whether the weights can be used now, later, or never as written."""

    READY = "Ready"
    PENDING = "Pending"
    INVALID = "Invalid"
    REMOTE = "Remote"
    """Fetched by the model cache (through the registry) before the engine can start."""


REMOTE_SCHEMES = frozenset({"hf", "s3", "gs", "gcs", "ngc", "oci"})
"""Schemes the registry's providers fetch (ModelExpress's Hugging Face, S3, GCS, NGC; OCI)."""


@dataclass(frozen=True, slots=True)
class SourceResolution:
    """Outcome of resolving a source; ``path`` is set when READY."""

    state: SourceState
    path: Path | None = None
    reason: str = ""
    message: str = ""


def resolve_source(source: str) -> SourceResolution:
    """file:///abs/dir with config.json is READY; hf/s3/gs/ngc/oci are REMOTE (the cache
    fetches them); any other scheme waits, saying why."""
    parts = urlsplit(source)
    scheme = parts.scheme.lower()
    if scheme in REMOTE_SCHEMES:
        return SourceResolution(SourceState.REMOTE, reason="CacheNotReady")
    if scheme != "file":
        known = ", ".join(f"{s}://" for s in sorted(REMOTE_SCHEMES))
        return SourceResolution(
            SourceState.PENDING,
            reason="CacheNotReady",
            message=f"the local runtime cannot fetch {scheme}:// sources: the registry fetches "
            f"{known}, and file:///absolute/dir is read in place",
        )
    if parts.netloc not in ("", "localhost"):
        return SourceResolution(
            SourceState.INVALID,
            reason="InvalidSource",
            message=f"file:// source must be file:///absolute/path, not host {parts.netloc!r}",
        )
    raw = unquote(parts.path)
    if not raw.startswith("/") or "\x00" in raw:
        return SourceResolution(
            SourceState.INVALID, reason="InvalidSource", message="file:// path must be absolute"
        )
    path = Path(raw)
    if not path.is_dir():
        # Nothing will create it for us: requests are refused at once until it appears.
        return SourceResolution(
            SourceState.PENDING,
            reason="SourceNotFound",
            message=f"model directory {raw} does not exist",
        )
    if not (path / "config.json").is_file():
        return SourceResolution(
            SourceState.PENDING,
            reason="CacheNotReady",
            message=f"model directory {raw} has no config.json",
        )
    return SourceResolution(SourceState.READY, path=path, reason="Cached")


SOURCE_HOLD_ANNOTATION = "flexinfer.ai/source-hold"
"""On a Model whose source is not there yet, written by whoever owns the Model's spec (the
ModelDeployment bridge, while the ModelCache it names is not Ready): JSON ``{"reason",
"message", "failed"}``. The Model then starts nothing and reports the hold as its status."""


@dataclass(frozen=True, slots=True)
class SourceHold:
    """Why a Model may not start yet (``failed``: not until its spec's owner acts)."""

    reason: str
    message: str
    failed: bool = False

    def dump(self) -> str:
        """The annotation's value."""
        body = {"reason": self.reason, "message": self.message, "failed": self.failed}
        return json.dumps(body, sort_keys=True)


def source_hold(annotations: Mapping[str, str]) -> SourceHold | None:
    """The hold ``annotations`` carry, or None; an unreadable one still holds (and says so)."""
    raw = annotations.get(SOURCE_HOLD_ANNOTATION)
    if raw is None:
        return None
    try:
        body = json.loads(raw)
        return SourceHold(str(body["reason"]), str(body["message"]), bool(body.get("failed")))
    except (ValueError, TypeError, KeyError):
        message = f"annotation {SOURCE_HOLD_ANNOTATION} is not the JSON its writer sets: {raw!r}"
        return SourceHold("InvalidSourceHold", message[:1024])
