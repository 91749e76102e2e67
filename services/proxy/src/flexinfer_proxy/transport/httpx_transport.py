"""An upstream transport on httpx: the reference implementation behind the same seam.

Slower than ``h1`` (see bench/RESULTS.md), and kept so that the whole proxy test suite
also runs on a widely used client: a behaviour that holds on both is the transport's
contract, not an accident of one implementation.

It opens a connection per request. h11, under httpx, keeps bytes that arrive after an
answer's end and reads them as the answer to the next request on that connection
(tests/test_proxy_transport.py shows it), and httpx's API cannot tell such a connection
from a clean one; a proxy must never hand one client another's answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import httpx

from flexinfer_proxy.transport.base import (
    AnswerBrokenError,
    ConnectFailedError,
    RequestFailedError,
    UpstreamAnswer,
    UpstreamRequest,
    UpstreamTransport,
)
from flexinfer_proxy.transport.settings import TransportSettings

_CONNECT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


class HttpxAnswer(UpstreamAnswer):
    """An httpx response opened with ``stream=True``."""

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status = response.status_code
        self.headers = [(name.lower(), value) for name, value in response.headers.raw]

    def header(self, name: bytes) -> bytes | None:
        """The value of header ``name`` (lowercase), if present."""
        value = self._response.headers.get(name.decode("latin-1"))
        return None if value is None else value.encode("latin-1")

    def body_now(self) -> bytes | None:
        """None: httpx reads the body only when asked."""
        return None

    async def read(self) -> bytes:
        """The whole body."""
        return b"".join([chunk async for chunk in self.stream()])

    async def stream(self) -> AsyncIterator[bytes]:
        """The raw body (no content decoding: the client gets the engine's bytes)."""
        try:
            async for chunk in self._response.aiter_raw():
                yield chunk
        except httpx.HTTPError as exc:
            raise AnswerBrokenError(f"upstream {self._response.url} broke off: {exc!r}") from exc

    async def aclose(self) -> None:
        """Return the connection to httpx's pool (or close it)."""
        await self._response.aclose()


class HttpxTransport(UpstreamTransport):
    """One httpx.AsyncClient with the proxy's pool sizes and timeouts."""

    def __init__(self, settings: TransportSettings) -> None:
        timeout = httpx.Timeout(
            connect=settings.connect_timeout_s,
            read=settings.read_timeout_s,
            write=settings.read_timeout_s,
            pool=settings.connect_timeout_s,
        )
        limits = httpx.Limits(max_connections=settings.max_connections, max_keepalive_connections=0)
        self._client = httpx.AsyncClient(timeout=timeout, limits=limits, trust_env=False)

    async def request(self, base_url: str, request: UpstreamRequest) -> UpstreamAnswer:
        """Send ``request`` with its raw target; map httpx's errors to the transport's."""
        prefix = urlsplit(base_url).path.rstrip("/").encode()
        url = httpx.URL(base_url).copy_with(raw_path=prefix + request.target)
        headers = list(request.headers)
        if not isinstance(request.body, bytes) and request.length is not None:
            headers.append((b"content-length", b"%d" % request.length))
        built = self._client.build_request(
            request.method.decode("ascii"), url, headers=headers, content=request.body
        )
        try:
            response = await self._client.send(built, stream=True)
        except _CONNECT_ERRORS as exc:
            raise ConnectFailedError(f"cannot connect to {base_url}: {exc!r}") from exc
        except httpx.HTTPError as exc:
            raise RequestFailedError(f"upstream {base_url} failed: {exc!r}") from exc
        return HttpxAnswer(response)

    async def aclose(self) -> None:
        """Close the client and its connections."""
        await self._client.aclose()
