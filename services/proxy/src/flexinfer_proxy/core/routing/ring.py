"""A consistent-hash ring: CRC32 over 150 virtual nodes per endpoint."""

from __future__ import annotations

import bisect
import zlib
from collections.abc import Callable, Iterable

VNODES = 150


def crc32(text: str) -> int:
    """CRC32 of ``text`` as UTF-8 (the operator's hash)."""
    return zlib.crc32(text.encode("utf-8", "surrogatepass"))


class HashRing:
    """Maps keys to nodes so that adding or removing one of N nodes moves ~1/N of keys."""

    def __init__(self, nodes: Iterable[str], vnodes: int = VNODES) -> None:
        points = sorted(
            (crc32(f"{node}#{i}"), node) for node in dict.fromkeys(nodes) for i in range(vnodes)
        )
        self._hashes = [h for h, _ in points]
        self._nodes = [n for _, n in points]
        self.members = frozenset(self._nodes)

    def lookup(self, key: str, usable: Callable[[str], bool] | None = None) -> str | None:
        """The node owning ``key``: the first clockwise point whose node is usable."""
        if not self._hashes:
            return None
        start = bisect.bisect_left(self._hashes, crc32(key))
        count = len(self._hashes)
        tried: set[str] = set()
        for step in range(count):
            node = self._nodes[(start + step) % count]
            if node in tried:
                continue
            if usable is None or usable(node):
                return node
            tried.add(node)
            if len(tried) == len(self.members):
                return None
        return None
