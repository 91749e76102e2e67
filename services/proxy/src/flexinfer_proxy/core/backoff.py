"""Exponential backoff with full jitter, for re-sending a model's activation demand."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    """initial * 2**n seconds, capped at ``max_wait``, times a random factor in [0.5, 1]."""

    initial: float
    max_wait: float
    max_retries: int

    def delays(self, rng: random.Random | None = None) -> Iterator[float]:
        """The waits before each retry: ``max_retries`` of them, then the iterator ends."""
        rand = rng or random.Random()
        for attempt in range(self.max_retries):
            base = min(self.max_wait, self.initial * (2**attempt))
            # Jitter keeps many proxies from re-demanding in lockstep after an outage.
            yield base * (0.5 + rand.random() / 2)
