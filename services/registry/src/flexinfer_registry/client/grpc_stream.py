"""Server-streaming gRPC calls over :mod:`.h2_connection`, each message received in place.

:func:`unary_stream` yields every response message as a view of one reused buffer, filled
straight from the socket: a consumer that writes the data out moves each byte twice
(socket -> buffer -> file), as a local file copy does. It speaks plain gRPC over HTTP/2
(identity encoding, prior knowledge), so any gRPC server answers it.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator, Sequence
from urllib.parse import unquote

import grpc

from flexinfer_registry.client.errors import CallError
from flexinfer_registry.client.h2_connection import Data, H2Connection, Headers, Reset

STATUS_CODES = {code.value[0]: code for code in grpc.StatusCode}
HTTP_STATUS_CODES = {
    400: grpc.StatusCode.INTERNAL,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.UNIMPLEMENTED,
    429: grpc.StatusCode.UNAVAILABLE,
    502: grpc.StatusCode.UNAVAILABLE,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.UNAVAILABLE,
}
"""HTTP status of a non-gRPC answer -> gRPC status (gRPC's http-grpc-status-mapping)."""
MIN_BUFFER = 1 << 20
"""Smallest message buffer (bytes): the server's default chunk fits without regrowing."""


def unary_stream(
    address: str,
    method: str,
    request: bytes,
    *,
    timeout_s: float,
    max_message_bytes: int,
    metadata: Sequence[tuple[str, str]] = (),
) -> Generator[memoryview, None, None]:
    """Call ``method`` (``/package.Service/Method``) and yield each response message.

    A yielded view is valid until the next message is asked for. Raises CallError for a
    non-OK status or a failed connection; leaving early cancels the call on the server.
    """
    deadline = time.monotonic() + timeout_s
    connection = H2Connection.open(address, deadline)
    finished = False
    try:
        headers = _request_headers(address, method, timeout_s, metadata)
        connection.send_request(headers, _framed(request))
        yield from _Receiver(connection, max_message_bytes).messages()
        finished = True
    finally:
        if not finished:
            connection.reset()
        connection.close()


def _request_headers(
    address: str, method: str, timeout_s: float, metadata: Sequence[tuple[str, str]]
) -> list[tuple[str, str]]:
    authority = "localhost" if address.startswith("unix:") else address
    millis = max(1, min(int(timeout_s * 1000), 99_999_999))  # grpc-timeout: at most 8 digits
    return [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", method),
        (":authority", authority),
        ("te", "trailers"),
        ("content-type", "application/grpc"),
        ("user-agent", "flexinfer-mx"),
        ("grpc-timeout", f"{millis}m"),
        *((key.lower(), value) for key, value in metadata),
    ]


def _framed(message: bytes) -> bytes:
    return b"\x00" + len(message).to_bytes(4) + message


class _Receiver:
    """Reassembles length-prefixed gRPC messages from DATA payloads, in one reused buffer."""

    def __init__(self, connection: H2Connection, max_message_bytes: int) -> None:
        self._connection = connection
        self._limit = max_message_bytes
        self._prefix = memoryview(bytearray(5))
        self._have_prefix = 0
        self._buffer = memoryview(bytearray(MIN_BUFFER))
        self._size = -1  # size of the message being received; -1 while reading its prefix
        self._filled = 0

    def messages(self) -> Iterator[memoryview]:
        """Each message until the trailers; raises CallError unless they say OK."""
        headers_seen = False
        while True:
            event = self._connection.receive()
            if isinstance(event, Reset):
                why = f"the server reset the stream (HTTP/2 error {event.error_code:#x})"
                raise CallError(_reset_status(event.error_code), why)
            if isinstance(event, Headers):
                if headers_seen or event.end_stream:  # trailers (or a trailers-only answer)
                    if not headers_seen:
                        _check_response(event.fields)
                    self._finish(event)
                    return
                _check_response(event.fields)
                headers_seen = True
                continue
            if not headers_seen:
                raise CallError(grpc.StatusCode.INTERNAL, "DATA before the response headers")
            yield from self._payload(event)
            if event.end_stream:
                raise CallError(grpc.StatusCode.INTERNAL, "the stream ended without trailers")

    def _payload(self, event: Data) -> Iterator[memoryview]:
        connection = self._connection
        while connection.payload_left:
            if self._size < 0:
                want = min(5 - self._have_prefix, connection.payload_left)
                connection.read_into(self._prefix[self._have_prefix : self._have_prefix + want])
                self._have_prefix += want
                if self._have_prefix == 5:
                    self._start_message()
                    if self._size == 0:
                        yield self._done()
                continue
            want = min(self._size - self._filled, connection.payload_left)
            connection.read_into(self._buffer[self._filled : self._filled + want])
            self._filled += want
            if self._filled == self._size:
                yield self._done()

    def _start_message(self) -> None:
        if self._prefix[0] != 0:
            why = "the server sent a compressed message; none was negotiated"
            raise CallError(grpc.StatusCode.INTERNAL, why)
        size = int.from_bytes(self._prefix[1:5])
        if size > self._limit:
            why = f"a message of {size} bytes exceeds the limit of {self._limit}"
            raise CallError(grpc.StatusCode.RESOURCE_EXHAUSTED, why)
        if size > len(self._buffer):
            # A new buffer, never a resize: the consumer may still hold a view of the old one.
            self._buffer = memoryview(bytearray(size))
        self._size, self._filled = size, 0

    def _done(self) -> memoryview:
        message = self._buffer[: self._size]
        self._size, self._have_prefix = -1, 0
        return message

    def _finish(self, trailers: Headers) -> None:
        if self._size >= 0 or self._have_prefix:
            raise CallError(grpc.StatusCode.INTERNAL, "the stream ended inside a message")
        fields = dict(trailers.fields)
        raw = fields.get("grpc-status")
        if raw is None or not raw.isdigit():
            why = f"trailers without a valid grpc-status: {raw!r}"
            raise CallError(grpc.StatusCode.INTERNAL, why)
        code = STATUS_CODES.get(int(raw), grpc.StatusCode.UNKNOWN)
        if code != grpc.StatusCode.OK:
            raise CallError(code, unquote(fields.get("grpc-message", "")) or code.name)


def _check_response(fields: list[tuple[str, str]]) -> None:
    """Response headers must be HTTP 200 with a gRPC content type."""
    headers = dict(fields)
    status = headers.get(":status", "")
    if status != "200":
        number = int(status) if status.isdigit() else 0
        code = HTTP_STATUS_CODES.get(number, grpc.StatusCode.UNKNOWN)
        raise CallError(code, f"the server answered HTTP {status or 'without a status'}")
    if not headers.get("content-type", "").startswith("application/grpc"):
        why = f"not a gRPC answer (content-type {headers.get('content-type')!r})"
        raise CallError(grpc.StatusCode.UNKNOWN, why)


def _reset_status(error_code: int) -> grpc.StatusCode:
    if error_code == 0x7:  # REFUSED_STREAM: the server did not start it; safe to retry
        return grpc.StatusCode.UNAVAILABLE
    if error_code == 0x8:
        return grpc.StatusCode.CANCELLED
    return grpc.StatusCode.INTERNAL
