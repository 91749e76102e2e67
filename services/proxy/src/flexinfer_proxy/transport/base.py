"""The seam between the proxy's decisions and the wire: one request out, its answer back.

The request pipeline builds an ``UpstreamRequest`` and hands it to an ``UpstreamTransport``;
it never sees a socket. Implementations: ``h1`` (the proxy's own pooled HTTP/1.1 client,
the default, measured in bench/proxy.py) and ``httpx`` (the reference implementation the
whole proxy test suite also runs on, which keeps the seam honest).

Errors, which every implementation maps its own failures to::

    TransportError
    ├── ConnectFailedError   no connection could be made: nothing was sent (retry elsewhere)
    ├── RequestFailedError   the request failed before the answer's head arrived; the
    │                        engine may have run it, so it is never resent
    └── AnswerBrokenError    the answer's body broke off (reset, timeout, bad framing)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass


class TransportError(Exception):
    """The upstream exchange failed."""


class ConnectFailedError(TransportError):
    """No connection could be made: nothing was sent."""


class RequestFailedError(TransportError):
    """The request failed before the answer's head arrived (it may have been processed)."""


class AnswerBrokenError(TransportError):
    """The answer's body broke off before its end."""


@dataclass(slots=True)
class UpstreamRequest:
    """One request for an engine, built from the client's raw bytes."""

    method: bytes
    target: bytes
    """The request-target exactly as the client sent it (a model prefix stripped)."""
    headers: list[tuple[bytes, bytes]]
    """End-to-end headers to forward; the transport adds Host and the body's framing."""
    body: bytes | AsyncIterable[bytes]
    length: int | None = None
    """Content-Length of a streamed body when the client declared one (else chunked)."""


class UpstreamAnswer(ABC):
    """An answer whose status and headers arrived; its body is read once."""

    status: int
    headers: list[tuple[bytes, bytes]]
    """As received, hop-by-hop headers included (the relay drops those); names lowercase."""

    @abstractmethod
    def header(self, name: bytes) -> bytes | None:
        """The value of header ``name`` (lowercase), if present."""

    @abstractmethod
    def body_now(self) -> bytes | None:
        """The whole body if all of it has arrived already (no waiting), else None."""

    @abstractmethod
    async def read(self) -> bytes:
        """The whole body; AnswerBrokenError if it breaks off."""

    @abstractmethod
    def stream(self) -> AsyncIterator[bytes]:
        """The body in chunks as they arrive; AnswerBrokenError if it breaks off."""

    @abstractmethod
    async def aclose(self) -> None:
        """Done with the answer: a reusable connection goes back to the pool."""


class UpstreamTransport(ABC):
    """Sends requests to engines over connections it pools."""

    @abstractmethod
    async def request(self, base_url: str, request: UpstreamRequest) -> UpstreamAnswer:
        """Send ``request`` to the engine at ``base_url``; its answer once the head is in."""

    @abstractmethod
    async def aclose(self) -> None:
        """Close every pooled connection."""
