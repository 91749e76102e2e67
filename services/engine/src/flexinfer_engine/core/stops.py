"""Stop-string detection that never streams text a stop string could still swallow."""

from __future__ import annotations

from collections.abc import Sequence


class StopMatcher:
    """Feeds generated text through; emits what is safe and reports when a stop matched."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self._pending = ""
        self.stopped = False

    def feed(self, text: str) -> str:
        """The text that may be emitted now; sets ``stopped`` when a stop string appeared."""
        if not self.stops:
            return text
        self._pending += text
        cut = min((i for i in (self._pending.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            out, self._pending = self._pending[:cut], ""
            return out
        keep = self._held_back()
        out = self._pending[: len(self._pending) - keep]
        self._pending = self._pending[len(self._pending) - keep :]
        return out

    def flush(self) -> str:
        """Text held back when generation ended without a stop."""
        out, self._pending = self._pending, ""
        return out

    def _held_back(self) -> int:
        # The longest tail of pending text that is a prefix of some stop string.
        longest = 0
        for stop in self.stops:
            for size in range(min(len(stop) - 1, len(self._pending)), longest, -1):
                if self._pending.endswith(stop[:size]):
                    longest = size
                    break
        return longest
