"""copy_file_range(2): the kernel copies (and may share extents) without user-space buffers."""

from __future__ import annotations

import os

from flexinfer_controller.flashload.copiers.base import source_shrank, unsupported_or


class CopyFileRangeCopier:
    """Ranges copied with ``os.copy_file_range``, ``step`` bytes per call."""

    name = "copy_file_range"

    def __init__(self, step: int) -> None:
        self.step = step

    def copy(self, src: int, dst: int, offset: int, length: int) -> None:
        """Copy ``length`` bytes at ``offset``; both files keep their positions."""
        end = offset + length
        while offset < end:
            try:
                done = os.copy_file_range(src, dst, min(self.step, end - offset), offset, offset)
            except OSError as exc:
                raise unsupported_or(exc) from exc
            if done == 0:
                raise source_shrank(offset)
            offset += done
