"""The first copier the kernel accepts for this pair of filesystems, remembered per load."""

from __future__ import annotations

from collections.abc import Sequence

from flexinfer_controller.flashload.copiers.base import RangeCopier, UnsupportedError
from flexinfer_controller.flashload.errors import FlashLoadError


class AutoCopier:
    """Tries each copier in order; one that is refused once is not tried again."""

    name = "auto"

    def __init__(self, chain: Sequence[RangeCopier]) -> None:
        self._chain = list(chain)
        self._first = 0  # advanced by any worker; a stale read only retries one copier

    @property
    def chosen(self) -> str:
        """The copier used now (the name of the first one not refused)."""
        return self._chain[min(self._first, len(self._chain) - 1)].name

    def copy(self, src: int, dst: int, offset: int, length: int) -> None:
        """Copy with the first accepted copier; a refused one's range is copied again."""
        for index in range(self._first, len(self._chain)):
            try:
                self._chain[index].copy(src, dst, offset, length)
            except UnsupportedError:
                self._first = max(self._first, index + 1)
                continue
            return
        raise FlashLoadError("no copy method works between these filesystems")
