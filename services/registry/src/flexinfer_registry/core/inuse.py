"""Which models this process is using right now (downloading or streaming): never evict them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager


class InUse:
    """A per-key use counter."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()

    @contextmanager
    def using(self, key: str) -> Iterator[None]:
        """Mark ``key`` in use for the duration of the block."""
        self._counts[key] += 1
        try:
            yield
        finally:
            self._counts[key] -= 1
            if self._counts[key] <= 0:
                del self._counts[key]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._counts[key] > 0
