"""The HTTP/2 gRPC streaming client against a scripted server that sends exact frames.

A real grpcio server exercises the common path (test_registry_stream.py); these tests send
what grpcio seldom or never sends (padding, CONTINUATION, tiny frames, PINGs mid-stream,
resets, bad prefixes, stalls) and check the client neither loses data nor hangs.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

import grpc
import hpack
import pytest

from flexinfer_registry.client.errors import CallError
from flexinfer_registry.client.grpc_stream import unary_stream
from flexinfer_registry.client.h2_connection import (
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    PADDED,
    PING,
    PREFACE,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    frame,
)

METHOD = "/test.Service/Stream"
OK_HEADERS = [(":status", "200"), ("content-type", "application/grpc")]


@dataclass
class Peer:
    """The server's end of one connection, driven by a test's script."""

    sock: socket.socket
    encoder: hpack.Encoder = field(default_factory=hpack.Encoder)
    request: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    data_frame_sizes: list[int] = field(default_factory=list)

    def read_frame(self) -> tuple[int, int, int, bytes]:
        """(type, flags, stream, payload) of the client's next frame."""
        header = self.exactly(9)
        payload = self.exactly(int.from_bytes(header[:3]))
        return header[3], header[4], int.from_bytes(header[5:9]), payload

    def accept_request(self, settings: bytes = b"", grant: bool = True) -> None:
        """Read the preface and the whole request; answer SETTINGS first."""
        assert self.exactly(len(PREFACE)) == PREFACE
        self.send(SETTINGS, 0, 0, settings)
        block, decoder = b"", hpack.Decoder()
        while True:
            kind, flags, _, payload = self.read_frame()
            if kind in (HEADERS, CONTINUATION):
                block += payload
                if flags & END_HEADERS:
                    self.request = [(str(k), str(v)) for k, v in decoder.decode(block)]
            elif kind == DATA:
                self.body += payload
                self.data_frame_sizes.append(len(payload))
                if flags & END_STREAM:
                    return
                if grant and len(self.body) >= 65_535:
                    raise AssertionError("the client sent past the initial window")

    def send(self, kind: int, flags: int, stream: int, payload: bytes = b"") -> None:
        self.sock.sendall(frame(kind, flags, stream, payload))

    def headers(self, fields: list[tuple[str, str]], end_stream: bool = False) -> None:
        flags = END_HEADERS | (END_STREAM if end_stream else 0)
        self.send(HEADERS, flags, 1, self.encoder.encode(fields))

    def data(self, payload: bytes, end_stream: bool = False) -> None:
        self.send(DATA, END_STREAM if end_stream else 0, 1, payload)

    def trailers(self, status: int = 0, message: str = "") -> None:
        fields = [("grpc-status", str(status))]
        if message:
            fields.append(("grpc-message", message))
        self.headers(fields, end_stream=True)

    def exactly(self, size: int) -> bytes:
        """The client's next ``size`` bytes."""
        out = b""
        while len(out) < size:
            piece = self.sock.recv(size - len(out))
            if not piece:
                raise ConnectionError("the client closed the connection")
            out += piece
        return out


@contextmanager
def scripted(script: Callable[[Peer], None]) -> Iterator[tuple[str, list[Peer]]]:
    """A one-connection server running ``script``; yields (address, [peer once connected])."""
    listener = socket.create_server(("127.0.0.1", 0))
    peers: list[Peer] = []
    failures: list[BaseException] = []

    def serve() -> None:
        sock, _ = listener.accept()
        with sock:
            peers.append(Peer(sock))
            try:
                script(peers[0])
                # Close only once the client has: closing with its frames unread would
                # reset the connection, and a reset discards what the client has not read.
                sock.shutdown(socket.SHUT_WR)
                sock.settimeout(5)
                with suppress(ConnectionResetError):  # a client that left before reading all
                    while sock.recv(65_536):
                        pass
            except (OSError, AssertionError) as exc:
                failures.append(exc)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}", peers
    finally:
        thread.join(10)
        listener.close()
    assert not failures, failures


def call(
    address: str, timeout_s: float = 5.0, limit: int = 1 << 20, request: bytes = b"req"
) -> list[bytes]:
    """Every message of one call, copied out of the receive buffer."""
    messages = unary_stream(address, METHOD, request, timeout_s=timeout_s, max_message_bytes=limit)
    return [bytes(message) for message in messages]


def framed(message: bytes, compressed: int = 0) -> bytes:
    return bytes([compressed]) + struct.pack(">I", len(message)) + message


def test_messages_survive_tiny_padded_frames_continuations_and_pings() -> None:
    messages = [b"", b"x" * 70_000, b"abc"]
    stream = b"".join(framed(m) for m in messages)
    pongs: list[bytes] = []

    def script(peer: Peer) -> None:
        peer.accept_request()
        block = peer.encoder.encode(OK_HEADERS)
        peer.send(HEADERS, 0, 1, block[:2])
        peer.send(CONTINUATION, END_HEADERS, 1, block[2:])
        for index, at in enumerate(range(0, len(stream), 999)):
            piece = stream[at : at + 999]
            if index % 2:  # pad length byte, the data, then 7 bytes of padding
                peer.send(DATA, PADDED, 1, b"\x07" + piece + b"\x00" * 7)
            else:
                peer.data(piece)
            if index == 3:
                peer.send(PING, 0, 0, b"12345678")
        peer.trailers()
        while True:  # the PING's answer arrives before the connection closes
            kind, _, _, payload = peer.read_frame()
            if kind == PING:
                pongs.append(payload)
                return

    with scripted(script) as (address, peers):
        assert call(address) == messages
    request = dict(peers[0].request)
    assert request[":path"] == METHOD
    assert request["content-type"] == "application/grpc"
    assert request["te"] == "trailers"
    assert request["grpc-timeout"].endswith("m")
    assert peers[0].body == framed(b"req")
    assert pongs == [b"12345678"]


@pytest.mark.parametrize(
    ("status", "message", "code", "details"),
    [
        (5, "model%20%27x%27 not found", grpc.StatusCode.NOT_FOUND, "model 'x' not found"),
        (3, "", grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT"),
        (99, "odd", grpc.StatusCode.UNKNOWN, "odd"),
    ],
)
def test_trailers_only_error_carries_code_and_decoded_message(
    status: int, message: str, code: grpc.StatusCode, details: str
) -> None:
    def script(peer: Peer) -> None:
        peer.accept_request()
        fields = [*OK_HEADERS, ("grpc-status", str(status)), ("grpc-message", message)]
        peer.headers(fields, end_stream=True)

    with scripted(script) as (address, _), pytest.raises(CallError) as caught:
        call(address)
    assert (caught.value.code, caught.value.details) == (code, details)


def test_trailers_only_split_over_continuation_still_ends_the_stream() -> None:
    def script(peer: Peer) -> None:
        peer.accept_request()
        fields = [*OK_HEADERS, ("grpc-status", "7"), ("grpc-message", "no")]
        block = peer.encoder.encode(fields)
        peer.send(HEADERS, END_STREAM | PADDED, 1, b"\x02" + block[:3] + b"\x00\x00")
        peer.send(CONTINUATION, 0, 1, block[3:5])
        peer.send(CONTINUATION, END_HEADERS, 1, block[5:])

    with scripted(script) as (address, _), pytest.raises(CallError) as caught:
        call(address)
    assert (caught.value.code, caught.value.details) == (grpc.StatusCode.PERMISSION_DENIED, "no")


def test_an_error_after_messages_keeps_the_messages_already_received() -> None:
    received: list[bytes] = []

    def script(peer: Peer) -> None:
        peer.accept_request()
        peer.headers(OK_HEADERS)
        peer.data(framed(b"one"))
        peer.trailers(14, "going away")

    def consume(address: str) -> None:
        for message in unary_stream(address, METHOD, b"", timeout_s=5, max_message_bytes=99):
            received.append(bytes(message))

    with scripted(script) as (address, _), pytest.raises(CallError) as caught:
        consume(address)
    assert received == [b"one"]
    assert caught.value.code == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize(
    ("answer", "code"),
    [
        ([(":status", "503"), ("content-type", "text/html")], grpc.StatusCode.UNAVAILABLE),
        ([(":status", "404")], grpc.StatusCode.UNIMPLEMENTED),
        ([(":status", "200"), ("content-type", "text/html")], grpc.StatusCode.UNKNOWN),
    ],
)
def test_a_non_grpc_answer_maps_its_http_status(
    answer: list[tuple[str, str]], code: grpc.StatusCode
) -> None:
    def script(peer: Peer) -> None:
        peer.accept_request()
        peer.headers(answer, end_stream=True)

    with scripted(script) as (address, _), pytest.raises(CallError) as caught:
        call(address)
    assert caught.value.code == code


@pytest.mark.parametrize(
    ("send", "code"),
    [
        (lambda p: p.send(RST_STREAM, 0, 1, struct.pack(">I", 0x2)), grpc.StatusCode.INTERNAL),
        (lambda p: p.send(RST_STREAM, 0, 1, struct.pack(">I", 0x7)), grpc.StatusCode.UNAVAILABLE),
        (
            lambda p: p.send(GOAWAY, 0, 0, struct.pack(">II", 0, 0) + b"bye"),
            grpc.StatusCode.UNAVAILABLE,
        ),
        (lambda p: p.data(framed(b"abcdef")[:7]), grpc.StatusCode.UNAVAILABLE),  # then closes
        (lambda p: p.data(framed(b"x", compressed=1)), grpc.StatusCode.INTERNAL),
        (lambda p: p.data(framed(b"y" * 100)), grpc.StatusCode.RESOURCE_EXHAUSTED),
        (lambda p: p.data(framed(b"z"), end_stream=True), grpc.StatusCode.INTERNAL),
        (lambda p: p.send(DATA, PADDED, 1, b"\x09abc"), grpc.StatusCode.INTERNAL),
    ],
    ids=["reset", "refused", "goaway", "cut", "compressed", "too-large", "no-trailers", "pad"],
)
def test_broken_streams_fail_with_a_status_and_never_hang(
    send: Callable[[Peer], None], code: grpc.StatusCode
) -> None:
    def script(peer: Peer) -> None:
        peer.accept_request()
        peer.headers(OK_HEADERS)
        send(peer)

    started = time.monotonic()
    with scripted(script) as (address, _), pytest.raises(CallError) as caught:
        call(address, limit=50)
    assert caught.value.code == code
    assert time.monotonic() - started < 3


def test_a_stalled_server_ends_in_deadline_exceeded() -> None:
    release = threading.Event()

    def script(peer: Peer) -> None:
        peer.accept_request()
        peer.headers(OK_HEADERS)
        release.wait(10)

    started = time.monotonic()
    with scripted(script) as (address, _):
        with pytest.raises(CallError) as caught:
            call(address, timeout_s=0.5)
        release.set()
    assert caught.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert 0.4 < time.monotonic() - started < 3


def test_leaving_early_cancels_the_stream_on_the_server() -> None:
    seen: list[tuple[int, bytes]] = []

    def script(peer: Peer) -> None:
        peer.accept_request()
        peer.headers(OK_HEADERS)
        peer.data(framed(b"first") + framed(b"second"))
        while True:
            kind, _, stream, payload = peer.read_frame()
            if kind == RST_STREAM:
                seen.append((stream, payload))
                return

    with scripted(script) as (address, _):
        messages = unary_stream(address, METHOD, b"", timeout_s=5, max_message_bytes=99)
        assert bytes(next(messages)) == b"first"
        messages.close()
    assert seen == [(1, struct.pack(">I", 0x8))]  # CANCEL


def test_a_large_request_waits_for_window_updates_and_fits_the_frame_size() -> None:
    request = bytes(range(256)) * 800  # 204,800 bytes: three times the initial window

    def script(peer: Peer) -> None:
        assert peer.exactly(len(PREFACE)) == PREFACE
        peer.send(SETTINGS, 0, 0)
        sent = 0
        while sent < len(request) + 5:
            kind, _, _, payload = peer.read_frame()
            if kind != DATA:
                continue
            peer.body += payload
            peer.data_frame_sizes.append(len(payload))
            sent += len(payload)
            if sent % 65_535 == 0:  # the window is spent: grant another one
                grow = struct.pack(">I", 65_535)
                peer.send(WINDOW_UPDATE, 0, 0, grow)
                peer.send(WINDOW_UPDATE, 0, 1, grow)
        peer.headers(OK_HEADERS)
        peer.data(framed(b"done"))
        peer.trailers()

    with scripted(script) as (address, peers):
        assert call(address, request=request) == [b"done"]
    assert peers[0].body == framed(request)
    assert max(peers[0].data_frame_sizes) <= 16_384


def test_an_unreachable_server_is_unavailable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(CallError) as caught:
        call(f"127.0.0.1:{port}")
    assert caught.value.code == grpc.StatusCode.UNAVAILABLE
    with pytest.raises(CallError, match="not host:port"):
        call("no-port-here")
