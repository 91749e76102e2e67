"""The flash loader: a model copied from its cache to tmpfs before the engine starts.

On Kubernetes an init container runs it (``render``); in local mode the runtime calls
``prepare`` before it starts an engine; ``cleanup`` removes copies of models no longer
declared. Modules: ``plan`` (what is copied, where), ``space`` (does it fit), ``copy``
(parallel ranges into a temp directory renamed into place), ``manifest`` (reuse),
``cleanup``, ``local``, ``render``.
"""

from __future__ import annotations

from flexinfer_controller.flashload.cleanup import CleanupReport, cleanup
from flexinfer_controller.flashload.copy import LoadResult, flash_load
from flexinfer_controller.flashload.errors import (
    FlashLoadError,
    InsufficientSpaceError,
    UnsafeSourceError,
)
from flexinfer_controller.flashload.local import prepare
from flexinfer_controller.flashload.settings import FlashLoadSettings
from flexinfer_controller.flashload.space import FreeSpace, StatvfsSpace

__all__ = [
    "CleanupReport",
    "FlashLoadError",
    "FlashLoadSettings",
    "FreeSpace",
    "InsufficientSpaceError",
    "LoadResult",
    "StatvfsSpace",
    "UnsafeSourceError",
    "cleanup",
    "flash_load",
    "prepare",
]
