"""A TCP proxy whose faults the test controls, one fault per connection.

``FaultProxy(target)`` listens on a loopback port and forwards each accepted connection to
``target`` under a ``Fault``: pass, delay every chunk, reset (RST via SO_LINGER 0), blackhole
(accept, read, never answer), or cut the connection after N bytes went to the client. A
connection takes the next fault queued with ``then``, else the current ``fault``. The proxy
runs its own event loop in a thread, so sync tests (subprocess stacks, the sync openai SDK)
and async ones use it alike; every connection is recorded for the test to count.
(``flexinfer_testing.ports`` has the faults that need no proxy: a dead port, a port whose
connects hang.)
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from enum import StrEnum

_CHUNK = 65536


class Mode(StrEnum):
    """What the proxy does with one connection."""

    PASS = "pass"
    """Forward both ways, untouched."""
    DELAY = "delay"
    """Forward both ways, holding every chunk ``delay_s`` first."""
    RESET = "reset"
    """Answer the client's first byte with a TCP reset; the target never sees a byte."""
    BLACKHOLE = "blackhole"
    """Accept, read and drop what the client sends, never answer, never close."""
    CUT = "cut"
    """Forward until ``after_bytes`` went to the client, then close (or reset) both ends."""
    STALL = "stall"
    """Forward until ``after_bytes`` went to the client, then go silent, holding it open."""


@dataclass(frozen=True, slots=True)
class Fault:
    """The fault one connection gets."""

    mode: Mode = Mode.PASS
    delay_s: float = 0.0
    after_bytes: int = 0
    rst: bool = False
    """For CUT: end the client side with a reset instead of a FIN."""
    marker: bytes = b""
    """For CUT and STALL: count ``after_bytes`` from the end of the ``occurrence``-th
    ``marker`` in what goes to the client, rather than from its first byte."""
    occurrence: int = 1


PASS = Fault()
RESET = Fault(Mode.RESET)
BLACKHOLE = Fault(Mode.BLACKHOLE)


def delay(seconds: float) -> Fault:
    """Hold every forwarded chunk ``seconds`` first."""
    return Fault(Mode.DELAY, delay_s=seconds)


def cut_after(count: int, *, marker: bytes = b"", occurrence: int = 1, rst: bool = False) -> Fault:
    """Forward ``count`` bytes to the client (counted after the ``occurrence``-th
    ``marker``, if one is given), then close (``rst``: reset) the connection."""
    return Fault(Mode.CUT, after_bytes=count, rst=rst, marker=marker, occurrence=occurrence)


def stall_after(count: int, *, marker: bytes = b"", occurrence: int = 1) -> Fault:
    """Forward ``count`` bytes to the client (counted as in ``cut_after``), then send
    nothing more and keep the connection open."""
    return Fault(Mode.STALL, after_bytes=count, marker=marker, occurrence=occurrence)


def cut_position(fault: Fault, sent: bytes) -> int | None:
    """Where in ``sent`` (everything bound for the client so far) the fault cuts, if known."""
    if not fault.marker:
        return fault.after_bytes
    end = 0
    for _ in range(fault.occurrence):
        found = sent.find(fault.marker, end)
        if found < 0:
            return None
        end = found + len(fault.marker)
    return end + fault.after_bytes


@dataclass(slots=True)
class Connection:
    """What happened to one accepted connection."""

    number: int
    fault: Fault
    accepted_at: float
    up_bytes: int = 0
    """Bytes from the client forwarded to (or, blackholed, read for) the target."""
    down_bytes: int = 0
    """Bytes from the target forwarded to the client."""
    down_data: bytearray = field(default_factory=bytearray)
    """Those bytes themselves, when the proxy keeps them (``keep_bytes``)."""
    ended_at: float | None = None
    outcome: str = "open"
    """closed, reset, cut, blackholed, target unreachable."""


@dataclass(slots=True)
class _State:
    fault: Fault = PASS
    queued: deque[Fault] = field(default_factory=deque)
    connections: list[Connection] = field(default_factory=list)


def _snapshot(conn: Connection) -> Connection:
    return replace(conn, down_data=bytearray(conn.down_data))


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with SO_LINGER 0, so the kernel sends RST instead of FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultProxy:
    """Listens on 127.0.0.1:``port`` and forwards to ``target`` under per-connection faults."""

    def __init__(self, target: tuple[str, int], *, keep_bytes: bool = False) -> None:
        self.target = target
        self.keep_bytes = keep_bytes
        self.port = 0
        self._state = _State()
        self._changed = threading.Condition()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``: the proxied target's base URL."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def fault(self) -> Fault:
        """The fault of connections accepted from now on when nothing is queued."""
        return self._state.fault

    @fault.setter
    def fault(self, value: Fault) -> None:
        with self._changed:
            self._state.fault = value

    def then(self, *faults: Fault) -> None:
        """Give the next accepted connections these faults, in order."""
        with self._changed:
            self._state.queued.extend(faults)

    def connections(self) -> list[Connection]:
        """A snapshot of every connection accepted so far."""
        with self._changed:
            return [_snapshot(c) for c in self._state.connections]

    def wait(self, predicate: str, count: int, timeout_s: float) -> list[Connection]:
        """Wait until ``count`` connections were ``accepted`` or have ``ended``."""
        assert predicate in ("accepted", "ended")
        deadline = time.monotonic() + timeout_s

        def enough() -> bool:
            conns = self._state.connections
            if predicate == "ended":
                return sum(c.ended_at is not None for c in conns) >= count
            return len(conns) >= count

        with self._changed:
            while not enough():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"{count} connections not {predicate} in {timeout_s}s")
                self._changed.wait(remaining)
            return [_snapshot(c) for c in self._state.connections]

    def drop_all(self) -> None:
        """Reset every open connection now (the network dropped); the listener stays."""
        loop = self._loop
        assert loop is not None, "the fault proxy is not running"
        asyncio.run_coroutine_threadsafe(self._drop_all(), loop).result(10)

    async def _drop_all(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def start(self) -> FaultProxy:
        """Start listening (in a thread of its own); returns self."""
        loop = asyncio.new_event_loop()
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            self._server = loop.run_until_complete(
                asyncio.start_server(self._handle, "127.0.0.1", self.port)
            )
            self.port = int(self._server.sockets[0].getsockname()[1])
            started.set()
            loop.run_forever()

        self._loop = loop
        self._thread = threading.Thread(target=run, name=f"fault-proxy-{id(self)}", daemon=True)
        self._thread.start()
        if not started.wait(10):
            raise RuntimeError("the fault proxy did not start")
        return self

    def stop(self) -> None:
        """Close the listener and every connection, then end the thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        self._loop = self._thread = None

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._drop_all()
        if self._server is not None:
            await self._server.wait_closed()

    def _accept(self) -> Connection:
        with self._changed:
            state = self._state
            fault = state.queued.popleft() if state.queued else state.fault
            conn = Connection(len(state.connections) + 1, fault, time.monotonic())
            state.connections.append(conn)
            self._changed.notify_all()
            return conn

    def _end(self, conn: Connection, outcome: str) -> None:
        with self._changed:
            if conn.ended_at is None:
                conn.ended_at, conn.outcome = time.monotonic(), outcome
            self._changed.notify_all()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = self._accept()
        try:
            outcome = await self._serve(conn, reader, writer)
        except asyncio.CancelledError:
            outcome = "dropped by the test"
            _reset(writer)
        finally:
            self._tasks.discard(task)
            writer.close()
        self._end(conn, outcome)

    async def _serve(
        self, conn: Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> str:
        mode = conn.fault.mode
        if mode is Mode.RESET:
            await reader.read(1)
            _reset(writer)
            return "reset"
        if mode is Mode.BLACKHOLE:
            with contextlib.suppress(ConnectionError):
                while data := await reader.read(_CHUNK):
                    conn.up_bytes += len(data)
            return "blackholed"
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _reset(writer)
            return "target unreachable"
        try:
            return await self._forward(conn, (reader, writer), (up_reader, up_writer))
        finally:
            up_writer.transport.abort()

    async def _forward(
        self,
        conn: Connection,
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        target: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    ) -> str:
        up = asyncio.ensure_future(self._pipe(conn, client[0], target[1], upstream=True))
        down = asyncio.ensure_future(self._pipe(conn, target[0], client[1], upstream=False))
        try:
            done, _ = await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
            if down not in done:
                if conn.fault.mode is Mode.STALL:
                    return "stalled until the client left"
                # The client finished sending (a half close): the answer may still be coming.
                await asyncio.wait({down})
            if down.result() != "cut":
                return "closed"
            if conn.fault.rst:
                _reset(client[1])
                return "cut (reset)"
            return "cut"
        finally:
            for pipe in (up, down):
                pipe.cancel()
            await asyncio.gather(up, down, return_exceptions=True)

    async def _pipe(
        self,
        conn: Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        upstream: bool,
    ) -> str:
        fault = conn.fault
        limited = not upstream and fault.mode in (Mode.CUT, Mode.STALL)
        seen = bytearray()  # what went (or is going) to the client, to find the cut in
        with contextlib.suppress(OSError):  # a reset, or a peer gone before our half close
            while data := await reader.read(_CHUNK):
                if fault.mode is Mode.DELAY:
                    await asyncio.sleep(fault.delay_s)
                if limited:
                    seen += data
                    cut = cut_position(fault, bytes(seen))
                    if cut is not None and cut <= len(seen):
                        data = data[: cut - conn.down_bytes]
                        self._count(conn, data, upstream)
                        writer.write(data)
                        await writer.drain()
                        if fault.mode is Mode.STALL:
                            await asyncio.Event().wait()  # silent until the client leaves
                        return "cut"
                self._count(conn, data, upstream)
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
        return "eof"

    def _count(self, conn: Connection, data: bytes, upstream: bool) -> None:
        if upstream:
            conn.up_bytes += len(data)
            return
        conn.down_bytes += len(data)
        if self.keep_bytes:
            conn.down_data += data


@contextlib.contextmanager
def fault_proxy(
    target: tuple[str, int], fault: Fault = PASS, *, keep_bytes: bool = False
) -> Iterator[FaultProxy]:
    """A started FaultProxy in front of ``target``, stopped when the block exits."""
    proxy = FaultProxy(target, keep_bytes=keep_bytes)
    proxy.fault = fault
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()
