"""sendfile(2): in-kernel copy from a file into the destination's position, any filesystems."""

from __future__ import annotations

import os

from flexinfer_controller.flashload.copiers.base import source_shrank, unsupported_or


class SendfileCopier:
    """Ranges copied with ``os.sendfile`` (the destination fd's position is moved)."""

    name = "sendfile"

    def __init__(self, step: int) -> None:
        self.step = step

    def copy(self, src: int, dst: int, offset: int, length: int) -> None:
        """Copy ``length`` bytes at ``offset``; ``dst`` must be this task's own fd."""
        end = offset + length
        try:
            os.lseek(dst, offset, os.SEEK_SET)
            while offset < end:
                done = os.sendfile(dst, src, offset, min(self.step, end - offset))
                if done == 0:
                    raise source_shrank(offset)
                offset += done
        except OSError as exc:
            raise unsupported_or(exc) from exc
