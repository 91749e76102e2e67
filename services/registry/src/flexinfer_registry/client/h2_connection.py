"""A client HTTP/2 connection (RFC 9113, prior knowledge) that carries one stream and lets
its caller read DATA payloads straight into buffers of its own.

Only what a gRPC call needs: one client-initiated stream (id 1), control frames answered
here (SETTINGS, PING, WINDOW_UPDATE, GOAWAY), and flow control with large windows, so that
a server streaming big messages is never held back by this side. The point of it is
:meth:`H2Connection.read_into`: a DATA payload goes from the socket into the caller's
buffer with one copy, where a general-purpose client (grpcio) copies each byte twice more
in user space and hands every message between two threads.

Every failure is a :class:`CallError` whose ``code`` is the gRPC status code it maps to.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass

import grpc
import hpack

from flexinfer_registry.client.addresses import cleartext_address
from flexinfer_registry.client.errors import CallError

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY = range(8)
WINDOW_UPDATE, CONTINUATION = 8, 9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20
STREAM = 1
"""The one stream this connection opens."""
DEFAULT_MAX_FRAME = 16_384
"""What the peer accepts until its SETTINGS say more (RFC 9113 6.5.2)."""
MAX_FRAME = (1 << 24) - 1
"""The largest frame we accept: big DATA frames keep each message in few pieces."""
WINDOW = 1 << 30
"""Stream and connection receive windows (bytes): the server never waits on flow control."""
MAX_HEADER_BLOCK = 1 << 20
"""A header block (with its CONTINUATIONs) larger than this ends the call (a hostile peer)."""
WAIT_SLICE_S = 1.0
"""Longest single socket wait (s); the deadline is checked between waits."""
READ_AHEAD = 1 << 16
"""Bytes read at once for frame headers; DATA payload past them is read in place."""


@dataclass(frozen=True, slots=True)
class Headers:
    """A complete header block of our stream (response headers or trailers)."""

    fields: list[tuple[str, str]]
    end_stream: bool


@dataclass(frozen=True, slots=True)
class Data:
    """A DATA frame of ``length`` payload bytes, to be taken with read_into or skip."""

    length: int
    end_stream: bool


@dataclass(frozen=True, slots=True)
class Reset:
    """The server reset our stream."""

    error_code: int


Event = Headers | Data | Reset


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One frame's bytes: 24-bit length, type, flags, 31-bit stream id, payload."""
    head = len(payload).to_bytes(3) + bytes((kind, flags)) + stream.to_bytes(4)
    return head + payload


class H2Connection:
    """One TCP (or Unix socket) connection speaking HTTP/2 to a gRPC server."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline
        self._buffer = bytearray(READ_AHEAD)
        self._view = memoryview(self._buffer)
        self._start = self._end = 0
        self._encoder, self._decoder = hpack.Encoder(), hpack.Decoder()
        self._decoder.max_header_list_size = MAX_HEADER_BLOCK
        self._peer_max_frame = DEFAULT_MAX_FRAME
        self._peer_initial_window = 65_535
        self._send_window = {0: 65_535, STREAM: 65_535}
        self._unacked = 0  # received bytes not yet given back in WINDOW_UPDATEs
        self._pad = 0  # padding left of the DATA frame being read
        self._early: Event | None = None  # our stream's event read while still sending
        self._armed = WAIT_SLICE_S  # the socket's timeout (s)
        sock.settimeout(WAIT_SLICE_S)
        self.payload_left = 0
        """Payload bytes of the current DATA frame not taken yet."""

    @classmethod
    def open(cls, address: str, deadline: float) -> H2Connection:
        """Connect to ``host:port`` (or ``unix:path``) and send the preface and SETTINGS;
        TlsNotSupportedError for an ``https://`` address (never a cleartext fallback)."""
        address = cleartext_address(address)  # never a cleartext fallback for https://
        try:
            if address.startswith("unix:"):
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(_remaining(deadline))
                sock.connect(address.removeprefix("unix:").removeprefix("//"))
            else:
                host, port = _split(address)
                sock = socket.create_connection((host, port), timeout=_remaining(deadline))
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except (OSError, ValueError) as exc:
            why = f"cannot connect to {address}: {exc}"
            raise CallError(grpc.StatusCode.UNAVAILABLE, why) from exc
        connection = cls(sock, deadline)
        settings = struct.pack(">HIHIHI", 0x2, 0, 0x4, WINDOW, 0x5, MAX_FRAME)
        grow = struct.pack(">I", WINDOW - 65_535)
        connection._send(
            PREFACE + frame(SETTINGS, 0, 0, settings) + frame(WINDOW_UPDATE, 0, 0, grow)
        )
        return connection

    def close(self) -> None:
        """Close the socket."""
        self._sock.close()

    def send_request(self, headers: list[tuple[str, str]], body: bytes) -> None:
        """HEADERS then DATA with END_STREAM, within the peer's frame size and windows."""
        block = self._encoder.encode(headers)
        first, block = block[: self._peer_max_frame], block[self._peer_max_frame :]
        chunks = [frame(HEADERS, 0 if block else END_HEADERS, STREAM, first)]
        while block:
            piece, block = block[: self._peer_max_frame], block[self._peer_max_frame :]
            chunks.append(frame(CONTINUATION, 0 if block else END_HEADERS, STREAM, piece))
        self._send(b"".join(chunks))
        while True:
            room = min(self._send_window[0], self._send_window[STREAM], self._peer_max_frame)
            if body and room <= 0:
                event = self._control_frame()  # a WINDOW_UPDATE or SETTINGS makes room
                if event is not None:  # the server answered early (an error): stop sending
                    self._early = event
                    return
                continue
            piece, body = body[:room], body[room:]
            self._send_window[0] -= len(piece)
            self._send_window[STREAM] -= len(piece)
            self._send(frame(DATA, 0 if body else END_STREAM, STREAM, piece))
            if not body:
                return

    def reset(self) -> None:
        """Cancel our stream (RST_STREAM CANCEL); errors are moot, the call is over."""
        try:
            self._sock.settimeout(1.0)
            self._sock.sendall(frame(RST_STREAM, 0, STREAM, struct.pack(">I", 0x8)))
        except OSError:
            pass

    def receive(self) -> Event:
        """The next event of our stream, after any control frames before it."""
        if self._early is not None:
            event, self._early = self._early, None
            return event
        if self.payload_left:
            self.skip(self.payload_left)
        if self._pad:
            self._discard(self._pad)
            self._pad = 0
        while True:
            found = self._control_frame()
            if found is not None:
                return found

    def read_into(self, view: memoryview) -> None:
        """Fill ``view`` with the next bytes of the current DATA payload (at most what is left)."""
        if len(view) > self.payload_left:
            raise CallError(grpc.StatusCode.INTERNAL, "read past the DATA frame")
        self.payload_left -= len(view)
        self._read(view)

    def skip(self, size: int) -> None:
        """Drop ``size`` bytes of the current DATA payload."""
        self.payload_left -= size
        self._discard(size)

    def _control_frame(self) -> Event | None:
        """Read one frame: handle it if it is the connection's, else return our event."""
        header = self._take(9)
        length = int.from_bytes(header[:3])
        kind, flags, stream = header[3], header[4], int.from_bytes(header[5:9]) & 0x7FFF_FFFF
        if length > MAX_FRAME:
            raise CallError(grpc.StatusCode.INTERNAL, f"frame of {length} bytes exceeds our limit")
        if kind == DATA:
            return self._data(length, flags, stream)
        if kind == HEADERS:
            return self._headers(length, flags, stream)
        payload = self._take(length)
        if kind == SETTINGS and not flags & ACK:
            self._settings(payload)
        elif kind == PING and not flags & ACK:
            self._send(frame(PING, ACK, 0, payload))
        elif kind == WINDOW_UPDATE and stream in self._send_window:
            self._send_window[stream] += int.from_bytes(payload[:4]) & 0x7FFF_FFFF
        elif kind == GOAWAY:
            last, code = int.from_bytes(payload[:4]) & 0x7FFF_FFFF, int.from_bytes(payload[4:8])
            if last < STREAM:
                text = payload[8:200].decode(errors="replace")
                why = f"the server is going away (HTTP/2 error {code:#x}: {text})"
                raise CallError(grpc.StatusCode.UNAVAILABLE, why)
        elif kind == RST_STREAM and stream == STREAM:
            return Reset(int.from_bytes(payload[:4]))
        elif kind == PUSH_PROMISE:
            raise CallError(grpc.StatusCode.INTERNAL, "PUSH_PROMISE although push is disabled")
        return None  # PRIORITY, acks, unknown types: nothing to do

    def _data(self, length: int, flags: int, stream: int) -> Event | None:
        self._credit(length)
        pad = 0
        if flags & PADDED:
            if not length:
                raise CallError(grpc.StatusCode.INTERNAL, "padded DATA frame without a pad length")
            pad, length = self._take(1)[0], length - 1
            if pad > length:
                raise CallError(grpc.StatusCode.INTERNAL, "DATA padding longer than the frame")
            length -= pad
        if stream != STREAM:
            self._discard(length + pad)  # a stream we never opened: nothing to deliver
            return None
        self.payload_left, self._pad = length, pad
        return Data(length, bool(flags & END_STREAM))

    def _headers(self, length: int, flags: int, stream: int) -> Event | None:
        if length > MAX_HEADER_BLOCK:
            raise CallError(grpc.StatusCode.INTERNAL, f"a header block of {length} bytes")
        block = bytearray(self._take(length))
        if flags & PADDED:
            pad = block[0] if block else 256
            if pad >= len(block):
                raise CallError(grpc.StatusCode.INTERNAL, "HEADERS padding longer than the frame")
            block = block[1 : len(block) - pad]
        if flags & PRIORITY_FLAG:
            block = block[5:]
        end_stream = bool(flags & END_STREAM)  # set on HEADERS only, never on CONTINUATION
        while not flags & END_HEADERS:
            header = self._take(9)
            more, flags = int.from_bytes(header[:3]), header[4]
            if header[3] != CONTINUATION or len(block) + more > MAX_HEADER_BLOCK:
                raise CallError(grpc.StatusCode.INTERNAL, "header block broken or too large")
            block += self._take(more)
        try:
            fields = self._decoder.decode(bytes(block))
        except hpack.HPACKError as exc:
            raise CallError(grpc.StatusCode.INTERNAL, f"bad header block: {exc}") from exc
        if stream != STREAM:
            return None
        return Headers([(str(k), str(v)) for k, v in fields], end_stream)

    def _settings(self, payload: bytes) -> None:
        for at in range(0, len(payload) - len(payload) % 6, 6):
            key, value = struct.unpack_from(">HI", payload, at)
            if key == 0x4:
                self._send_window[STREAM] += value - self._peer_initial_window
                self._peer_initial_window = value
            elif key == 0x5:
                self._peer_max_frame = max(DEFAULT_MAX_FRAME, min(value, MAX_FRAME))
        self._send(frame(SETTINGS, ACK, 0))

    def _credit(self, length: int) -> None:
        """Count received DATA bytes; give them back once a quarter of the window is used."""
        self._unacked += length
        if self._unacked >= WINDOW // 4:
            grow = struct.pack(">I", self._unacked)
            self._unacked = 0
            self._send(frame(WINDOW_UPDATE, 0, 0, grow) + frame(WINDOW_UPDATE, 0, STREAM, grow))

    def _take(self, size: int) -> bytes:
        """The next ``size`` bytes of the connection (frame headers and small payloads)."""
        if size > self._end - self._start:
            out = bytearray(size)
            self._read(memoryview(out))
            return bytes(out)
        data = bytes(self._view[self._start : self._start + size])
        self._start += size
        return data

    def _read(self, view: memoryview) -> None:
        """Fill ``view`` from the connection: buffered bytes first, then the socket.

        A short remainder goes through the read-ahead buffer (one syscall for it and the
        next frame headers); a long one is received in place.
        """
        taken = min(len(view), self._end - self._start)
        view[:taken] = self._view[self._start : self._start + taken]
        self._start += taken
        if taken < len(view) and len(view) - taken < READ_AHEAD // 4:
            self._refill()
            rest = min(len(view) - taken, self._end - self._start)
            view[taken : taken + rest] = self._view[self._start : self._start + rest]
            self._start += rest
            taken += rest
        while taken < len(view):
            taken += self._recv(view[taken:])

    def _refill(self) -> None:
        self._start = self._end = 0
        self._end = self._recv(self._view)

    def _discard(self, size: int) -> None:
        scratch = memoryview(bytearray(min(size, READ_AHEAD)))
        while size:
            piece = scratch[: min(size, len(scratch))]
            self._read(piece)
            size -= len(piece)

    def _recv(self, view: memoryview) -> int:
        while True:
            self._arm()
            try:
                received = self._sock.recv_into(view)
            except TimeoutError:
                continue  # one wait slice is over; _arm says whether the deadline is
            except OSError as exc:
                raise CallError(grpc.StatusCode.UNAVAILABLE, f"connection lost: {exc}") from exc
            if not received:
                raise CallError(grpc.StatusCode.UNAVAILABLE, "the server closed the connection")
            return received

    def _send(self, data: bytes) -> None:
        while data:
            self._arm()
            try:
                data = data[self._sock.send(data) :]
            except TimeoutError:
                continue
            except OSError as exc:
                raise CallError(grpc.StatusCode.UNAVAILABLE, f"connection lost: {exc}") from exc

    def _arm(self) -> None:
        """Raise DEADLINE_EXCEEDED past the deadline; else bound the next socket wait by it.

        The socket waits in slices of WAIT_SLICE_S and is re-armed only within the last
        slice: setting a timeout costs a syscall, and streaming calls recv thousands of times.
        """
        left = _remaining(self._deadline)
        if left < self._armed:
            self._sock.settimeout(left)
            self._armed = left


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise CallError(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded")
    return left


def _split(address: str) -> tuple[str, int]:
    """(host, port) of ``host:port`` or ``[v6]:port``."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"{address!r} is not host:port")
    return host.removeprefix("[").removesuffix("]"), int(port)
