"""Range copiers by name: ``make_copier("auto", step)`` and the names in ``COPIERS``."""

from __future__ import annotations

from collections.abc import Callable

from flexinfer_common.errors import ConfigError
from flexinfer_controller.flashload.copiers.auto import AutoCopier
from flexinfer_controller.flashload.copiers.base import RangeCopier, UnsupportedError
from flexinfer_controller.flashload.copiers.copy_file_range import CopyFileRangeCopier
from flexinfer_controller.flashload.copiers.pread import PreadCopier
from flexinfer_controller.flashload.copiers.sendfile import SendfileCopier

COPIERS: dict[str, Callable[[int], RangeCopier]] = {
    "copy_file_range": CopyFileRangeCopier,
    "sendfile": SendfileCopier,
    "pread": PreadCopier,
}
"""Each copier's factory, taking the bytes per call; ``auto`` tries them in this order."""


def make_copier(method: str, step: int) -> RangeCopier:
    """The copier named ``method`` (or ``auto``: each in turn), moving ``step`` bytes a call."""
    if method == "auto":
        return AutoCopier([factory(step) for factory in COPIERS.values()])
    factory = COPIERS.get(method)
    if factory is None:
        raise ConfigError(f"unknown copy method {method!r}; known: auto, {', '.join(COPIERS)}")
    return factory(step)


__all__ = ["COPIERS", "AutoCopier", "RangeCopier", "UnsupportedError", "make_copier"]
