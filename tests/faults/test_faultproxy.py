"""The fault proxy itself does what each fault says, against a plain TCP echo-and-talk server.

The target answers every chunk it receives with that chunk, then sends ``TAIL``: enough to
check forwarding, cuts by byte count and by marker, resets, blackholes, stalls and delays.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from flexinfer_testing import faultproxy as fp
from flexinfer_testing.ports import unaccepting_listener

TAIL = b"one\n\ntwo\n\nthree\n\n"


@pytest.fixture
def target() -> Iterator[tuple[str, int]]:
    """A server that echoes one request chunk, sends TAIL, then closes."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                data = conn.recv(65536)
                conn.sendall(data + TAIL)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield ("127.0.0.1", int(listener.getsockname()[1]))
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def exchange(port: int, payload: bytes = b"hello", timeout_s: float = 5.0) -> bytes:
    """Send ``payload`` through the proxy and read until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as client:
        client.sendall(payload)
        received = b""
        while chunk := client.recv(65536):
            received += chunk
    return received


def test_pass_forwards_both_ways(target: tuple[str, int]) -> None:
    with fp.fault_proxy(target) as proxy:
        assert exchange(proxy.port) == b"hello" + TAIL
        (conn,) = proxy.wait("ended", 1, 5)
    assert (conn.up_bytes, conn.down_bytes, conn.outcome) == (5, 5 + len(TAIL), "closed")


def test_cut_after_a_byte_count_and_after_a_marker(target: tuple[str, int]) -> None:
    with fp.fault_proxy(target, fp.cut_after(7)) as proxy:
        assert exchange(proxy.port) == b"helloon"
        proxy.then(fp.cut_after(0, marker=b"\n\n", occurrence=2))
        assert exchange(proxy.port) == b"helloone\n\ntwo\n\n"
        outcomes = [c.outcome for c in proxy.wait("ended", 2, 5)]
    assert outcomes == ["cut", "cut"]


def test_reset_answers_the_first_byte_with_rst(target: tuple[str, int]) -> None:
    with fp.fault_proxy(target, fp.RESET) as proxy, pytest.raises(ConnectionResetError):
        exchange(proxy.port)


def test_blackhole_reads_and_never_answers(target: tuple[str, int]) -> None:
    with fp.fault_proxy(target, fp.BLACKHOLE) as proxy:
        with pytest.raises(TimeoutError):
            exchange(proxy.port, timeout_s=0.5)
        (conn,) = proxy.wait("ended", 1, 5)
    assert (conn.up_bytes, conn.down_bytes) == (5, 0)


def test_stall_sends_part_then_holds_the_connection(target: tuple[str, int]) -> None:
    with fp.fault_proxy(target, fp.stall_after(0, marker=b"one\n\n")) as proxy:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as client:
            client.sendall(b"x")
            received = b""
            while not received.endswith(b"one\n\n"):
                received += client.recv(65536)
            client.settimeout(0.5)
            with pytest.raises(TimeoutError):
                client.recv(65536)
        assert received == b"xone\n\n"


def test_delay_holds_every_chunk(target: tuple[str, int]) -> None:
    with fp.fault_proxy(target, fp.delay(0.3)) as proxy:
        started = time.monotonic()
        assert exchange(proxy.port) == b"hello" + TAIL
        assert time.monotonic() - started >= 0.6  # one chunk each way, each held 0.3 s


def test_an_unaccepting_listener_makes_connects_hang() -> None:
    with unaccepting_listener() as port, socket.socket() as client:
        client.settimeout(0.5)
        with pytest.raises(TimeoutError):
            client.connect(("127.0.0.1", port))
