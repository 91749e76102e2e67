"""The flash loader's errors; each names what was refused and why."""

from __future__ import annotations

from flexinfer_common.errors import PermanentError


class FlashLoadError(PermanentError):
    """A copy to tmpfs failed; the same copy would fail again."""


class UnsafeSourceError(FlashLoadError):
    """The source holds something that must not be copied (an escaping symlink, a FIFO)."""


class InsufficientSpaceError(FlashLoadError):
    """The model does not fit in the destination's free space (with the margin)."""

    def __init__(self, message: str, *, needed: int, free: int, margin: int) -> None:
        super().__init__(message)
        self.needed = needed
        self.free = free
        self.margin = margin
