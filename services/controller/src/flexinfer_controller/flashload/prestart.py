"""The flash loader as local mode's pre-start step (``core.prestart.PreStart``).

A Model's ``spec.cache.flashLoader`` decides per model: its ``enabled`` (unset: the
controller's ``FLEXINFER_FLASH_LOADER_ENABLED``), ``concurrency``, ``bufferSizeKB`` and
``verifyIntegrity`` override the controller's settings; everything else (tmpfs, margin,
copy method) is the node's business and stays the controller's.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from flexinfer_common.api import Model
from flexinfer_controller.flashload.cleanup import remove_model
from flexinfer_controller.flashload.errors import FlashLoadError
from flexinfer_controller.flashload.local import prepare
from flexinfer_controller.flashload.settings import FlashLoadSettings

log = logging.getLogger(__name__)


def model_settings(model: Model, settings: FlashLoadSettings) -> FlashLoadSettings:
    """The controller's flash settings with the Model's own ``spec.cache.flashLoader``."""
    cache = model.spec.cache
    spec = cache.flash_loader if cache is not None else None
    if spec is None:
        return settings
    update: dict[str, object] = {
        "concurrency": spec.concurrency,
        "buffer_size_kb": spec.buffer_size_kb,
    }
    if spec.enabled is not None:
        update["enabled"] = spec.enabled
    if spec.verify_integrity is not None:
        update["verify_integrity"] = spec.verify_integrity
    return settings.model_copy(update=update)


class FlashLoadPreStart:
    """Copy each model to tmpfs before its engine starts; drop the copy with the Model."""

    def __init__(self, settings: FlashLoadSettings) -> None:
        self._settings = settings

    async def prepare(self, model: Model, model_dir: Path) -> Path:
        """The tmpfs copy to launch from, or ``model_dir`` when the Model does not use one."""
        settings = model_settings(model, self._settings)
        if not settings.enabled:
            return model_dir
        # Blocking copies (seconds for a large model): a worker thread keeps the loop free.
        return await asyncio.to_thread(prepare, model_dir, settings, key=model.key)

    async def release(self, key: str) -> None:
        """Remove the Model's copy, unless the tmpfs is not there (nothing was copied)."""
        dest = self._settings.dest
        if not dest.is_dir():
            return
        try:
            await asyncio.to_thread(remove_model, dest, key)
        except FlashLoadError as exc:
            # A copy that cannot be removed must not hold the Model's deletion: the next
            # `flexinfer flash-load cleanup` (or a reboot: it is tmpfs) gets it.
            log.warning("cannot remove the flash copy of %s: %s", key, exc)
