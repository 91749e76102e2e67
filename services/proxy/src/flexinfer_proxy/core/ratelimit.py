"""Token buckets: one global, one per model; a request needs a token from both."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from flexinfer_common.errors import FlexInferError


class RateLimitedError(FlexInferError):
    """429: a bucket is empty; ``retry_after`` says when a token will be there."""

    code = "rate_limit_exceeded"

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class TokenBucket:
    """``rate`` tokens per second, holding at most ``burst``."""

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate = rate
        self.burst = max(1.0, burst)
        self._tokens = self.burst
        self._at = now

    def _refill(self, now: float) -> None:
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now

    def wait_s(self, now: float) -> float:
        """Seconds until a token is available (0 when one is now)."""
        self._refill(now)
        if self._tokens >= 1.0:
            return 0.0
        return (1.0 - self._tokens) / self.rate

    def take(self) -> None:
        """Consume a token (after ``wait_s`` said 0)."""
        self._tokens -= 1.0


class RateLimiter:
    """The global bucket, then the model's; a rate of 0 disables that bucket."""

    def __init__(
        self,
        *,
        global_rps: float,
        global_burst: float,
        model_rps: float,
        model_burst: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        now = clock()
        self._global = TokenBucket(global_rps, global_burst, now) if global_rps > 0 else None
        self._model_rps = model_rps
        self._model_burst = model_burst
        self._models: dict[str, TokenBucket] = {}

    @property
    def enabled(self) -> bool:
        """Whether any bucket exists."""
        return self._global is not None or self._model_rps > 0

    def check(self, model: str) -> None:
        """Take a token from both buckets, or raise RateLimitedError taking none."""
        now = self._clock()
        bucket = None
        if self._model_rps > 0:
            bucket = self._models.get(model)
            if bucket is None:
                bucket = self._models[model] = TokenBucket(self._model_rps, self._model_burst, now)
        if self._global is not None and (wait := self._global.wait_s(now)) > 0:
            raise RateLimitedError("Rate limit reached for the proxy", _ceil(wait))
        if bucket is not None and (wait := bucket.wait_s(now)) > 0:
            raise RateLimitedError(f"Rate limit reached for model {model}", _ceil(wait))
        if self._global is not None:
            self._global.take()
        if bucket is not None:
            bucket.take()

    def forget(self, keep: set[str]) -> None:
        """Drop buckets of models no longer declared (bounded memory)."""
        for key in [k for k in self._models if k not in keep]:
            del self._models[key]


def _ceil(seconds: float) -> float:
    return float(max(1, math.ceil(seconds)))
