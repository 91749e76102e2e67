"""Crash bookkeeping per model: restart backoff and crash-loop detection."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class _History:
    generation: int
    times: list[float] = field(default_factory=list)
    message: str = ""


class CrashTracker:
    """Counts unexpected engine exits per model generation within a sliding window."""

    def __init__(self, *, initial_s: float, max_s: float, limit: int, window_s: float) -> None:
        self._initial_s = initial_s
        self._max_s = max_s
        self._limit = limit
        self._window_s = window_s
        self._history: dict[str, _History] = {}

    def record(self, key: str, generation: int, now: float, message: str = "") -> None:
        """Note a crash of ``key``'s replica started from ``generation``."""
        history = self._history.get(key)
        if history is None or history.generation != generation:
            history = self._history[key] = _History(generation)
        history.times.append(now)
        history.message = message

    def last_message(self, key: str) -> str:
        """What the most recent crash of ``key`` said."""
        history = self._history.get(key)
        return history.message if history else ""

    def _recent(self, key: str, generation: int, now: float) -> list[float]:
        history = self._history.get(key)
        if history is None or history.generation != generation:
            return []
        history.times = [t for t in history.times if now - t < self._window_s]
        return history.times

    def crash_looping(self, key: str, generation: int, now: float) -> int:
        """The crash count if it reached the limit (the model should go Failed), else 0."""
        count = len(self._recent(key, generation, now))
        return count if count >= self._limit else 0

    def restart_delay(self, key: str, generation: int, now: float) -> float:
        """Seconds to wait before starting a replica again (0: start now)."""
        times = self._recent(key, generation, now)
        if not times:
            return 0.0
        backoff = min(self._max_s, self._initial_s * 2.0 ** (len(times) - 1))
        return max(0.0, times[-1] + backoff - now)

    def forget(self, key: str) -> None:
        """Drop the history of a deleted model."""
        self._history.pop(key, None)
