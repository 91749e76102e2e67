"""Tensor read leases: which peers are reading a source's memory right now.

A target takes a lease (PrepareTensorRead) before it READs and returns it after
(ReleaseTensorRead). The source must not free or repurpose the registered memory while a
lease is out (before sleeping, unloading or shutting down it drains them), and the count
is the in-flight load a load-aware selector spreads over. A lease a target never returns
(it died) expires after ``timeout_s``.
"""

from __future__ import annotations

import threading
import time
import uuid

LEASE_TIMEOUT_S = 270.0
"""ModelExpress's default: one metadata handshake and one bounded receive (2 x 120 s +
30 s); a dead reader blocks a drain at most this long."""


class DrainingError(RuntimeError):
    """The source is draining its readers and takes no new one."""


class ReadLeases:
    """Thread-safe leases with expiry and a drain."""

    def __init__(self, timeout_s: float = LEASE_TIMEOUT_S) -> None:
        if timeout_s <= 0:
            raise ValueError("a read lease timeout must be positive")
        self.timeout_s = timeout_s
        self._cond = threading.Condition()
        self._leases: dict[str, float] = {}
        self._accepting = True

    def prepare(self) -> str:
        """A new lease id; DrainingError while draining."""
        with self._cond:
            self._expire()
            if not self._accepting:
                raise DrainingError("the source is draining its readers")
            lease = uuid.uuid4().hex
            self._leases[lease] = time.monotonic() + self.timeout_s
            return lease

    def release(self, lease: str) -> None:
        """Return a lease; KeyError when unknown or expired."""
        with self._cond:
            self._expire()
            if self._leases.pop(lease, None) is None:
                raise KeyError(lease)
            self._cond.notify_all()

    def in_flight(self) -> int:
        """Leases out now."""
        with self._cond:
            self._expire()
            return len(self._leases)

    def drain(self, timeout_s: float) -> bool:
        """Stop taking readers and wait until none is left (True) or ``timeout_s`` passed
        (False, and readers are accepted again)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._accepting = False
            while True:
                self._expire()
                now = time.monotonic()
                if not self._leases:
                    return True
                if now >= deadline:
                    self._accepting = True
                    return False
                self._cond.wait(min(deadline, min(self._leases.values())) - now)

    def _expire(self) -> None:
        now = time.monotonic()
        for lease in [k for k, until in self._leases.items() if until <= now]:
            del self._leases[lease]
