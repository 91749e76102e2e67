"""pread/pwrite through one buffer: works on every filesystem, costs a user-space copy."""

from __future__ import annotations

import os
import threading

from flexinfer_controller.flashload.copiers.base import source_shrank, unsupported_or


class PreadCopier:
    """Ranges copied through a ``step``-byte buffer per thread (reused across ranges)."""

    name = "pread"

    def __init__(self, step: int) -> None:
        self.step = step
        self._local = threading.local()

    def _buffer(self) -> memoryview:
        found: memoryview | None = getattr(self._local, "buffer", None)
        if found is None:
            found = self._local.buffer = memoryview(bytearray(self.step))
        return found

    def copy(self, src: int, dst: int, offset: int, length: int) -> None:
        """Copy ``length`` bytes at ``offset`` by reading into the buffer and writing it."""
        buffer, end = self._buffer(), offset + length
        try:
            while offset < end:
                got = os.preadv(src, [buffer[: min(self.step, end - offset)]], offset)
                if got == 0:
                    raise source_shrank(offset)
                written = 0
                while written < got:
                    written += os.pwrite(dst, buffer[written:got], offset + written)
                offset += got
        except OSError as exc:
            raise unsupported_or(exc) from exc
