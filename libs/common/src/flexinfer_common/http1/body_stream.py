"""Request bodies read only as far as needed: a bounded prefix, then the rest streamed.

Only bodies that did not arrive whole with their head come here (a whole body is taken
at once, see ``Downstream.body_now``), so the timers below cost nothing on the hot path.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

from flexinfer_common.errors import BodyTimeoutError, BodyTooLargeError

Receive = Callable[[], Awaitable[tuple[bytes, bool]]]
"""The next body bytes and whether more follow (``Downstream.receive``)."""


class ClientGoneError(Exception):
    """The client disconnected before its request was served."""


async def read_prefix(
    receive: Receive, cap: int, limit: int, timeout_s: float
) -> tuple[bytes, bool]:
    """Up to about ``cap`` bytes of the body and whether more follows.

    The whole prefix must arrive within ``timeout_s`` (a slowloris client trickling bytes
    is cut off); BodyTooLargeError once more than ``limit`` bytes arrived.
    """
    chunks: list[bytes] = []
    total = 0
    more = True
    try:
        async with asyncio.timeout(timeout_s):
            while more and total < cap:
                chunk, more = await receive()
                total += len(chunk)
                if total > limit:
                    raise BodyTooLargeError(f"request body exceeds {limit} bytes")
                chunks.append(chunk)
    except TimeoutError:
        raise BodyTimeoutError(f"request body not received within {timeout_s:g}s") from None
    return b"".join(chunks), more


class BodyStream:
    """The forwarded body: a (possibly rewritten) prefix, then the client's remaining bytes.

    Iterated once by the upstream transport. ``started`` tells whether anything was sent
    (a failed connect can then be retried elsewhere).
    """

    def __init__(
        self, prefix: bytes, receive: Receive, *, received: int, limit: int, idle_s: float
    ) -> None:
        self.prefix = prefix
        self.started = False
        self._receive = receive
        self._received = received
        self._limit = limit
        self._idle_s = idle_s

    async def __aiter__(self) -> AsyncIterator[bytes]:
        """The prefix, then each chunk the client sends, as it arrives."""
        self.started = True
        yield self.prefix
        more = True
        while more:
            try:
                async with asyncio.timeout(self._idle_s):
                    chunk, more = await self._receive()
            except TimeoutError:
                raise BodyTimeoutError(f"no request body bytes for {self._idle_s:g}s") from None
            self._received += len(chunk)
            if self._received > self._limit:
                raise BodyTooLargeError(f"request body exceeds {self._limit} bytes")
            if chunk:
                yield chunk
