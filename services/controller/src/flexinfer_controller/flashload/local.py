"""Local mode's pre-start step: copy the model to tmpfs and say where to launch from."""

from __future__ import annotations

import hashlib
import logging
import re
from pathlib import Path

from flexinfer_controller.flashload.copy import flash_load
from flexinfer_controller.flashload.errors import InsufficientSpaceError
from flexinfer_controller.flashload.settings import FlashLoadSettings
from flexinfer_controller.flashload.space import FreeSpace

log = logging.getLogger(__name__)


def default_key(model_dir: Path) -> str:
    """A copy's name from its source path alone: the directory's name and a path hash."""
    resolved = model_dir.resolve()
    stem = re.sub(r"[^a-z0-9]+", "-", resolved.name.lower())[:40].strip("-") or "model"
    return f"{stem}-{hashlib.sha256(str(resolved).encode()).hexdigest()[:12]}"


def prepare(
    model_dir: Path,
    settings: FlashLoadSettings,
    *,
    key: str | None = None,
    space: FreeSpace | None = None,
) -> Path:
    """The path to launch the engine with: the tmpfs copy, or ``model_dir`` itself.

    ``model_dir`` itself when the flash loader is off, when it already lies on the tmpfs,
    or (with ``fallback_to_source``) when the copy does not fit. Blocking: call it from a
    worker thread in async code. ``key`` (``namespace/name``) names the copy, so cleanup
    can keep it by the Model's key; without one the name comes from the path.
    """
    if not settings.enabled:
        return model_dir
    dest = settings.dest.resolve()
    if dest == model_dir.resolve() or dest in model_dir.resolve().parents:
        return model_dir
    try:
        result = flash_load(model_dir, dest, key or default_key(model_dir), settings, space=space)
    except InsufficientSpaceError as exc:
        if not settings.fallback_to_source:
            raise
        log.warning("flash load skipped, launching from %s: %s", model_dir, exc)
        return model_dir
    if result.reused:
        log.info("flash copy of %s reused at %s", model_dir, result.path)
    else:
        log.info(
            "flash-loaded %s to %s: %d bytes in %.2f s (%.2f GB/s, %s)",
            model_dir,
            result.path,
            result.copied_bytes,
            result.seconds,
            result.gb_per_s,
            result.method,
        )
    return result.path
