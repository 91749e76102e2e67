"""The upstream transports, one contract for both (h1 and httpx), against scripted engines."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from flexinfer_proxy.testing_raw import OK, raw_server, read_request
from flexinfer_proxy.testing_stack import wait_until
from flexinfer_proxy.transport.base import (
    AnswerBrokenError,
    ConnectFailedError,
    RequestFailedError,
    UpstreamAnswer,
    UpstreamRequest,
    UpstreamTransport,
)
from flexinfer_proxy.transport.h1 import H1Transport
from flexinfer_proxy.transport.h1_answer import H1Answer
from flexinfer_proxy.transport.registry import TRANSPORTS, create_transport
from flexinfer_proxy.transport.settings import TransportSettings


def settings(read_timeout_s: float = 2.0) -> TransportSettings:
    """Small pools and short timeouts."""
    return TransportSettings(
        connect_timeout_s=2.0, read_timeout_s=read_timeout_s, max_connections=10, max_idle=4
    )


@pytest.fixture(params=sorted(TRANSPORTS))
async def transport(request: pytest.FixtureRequest) -> AsyncIterator[UpstreamTransport]:
    """Each transport in turn."""
    made = create_transport(str(request.param), settings())
    yield made
    await made.aclose()


@pytest.fixture(params=sorted(TRANSPORTS))
async def quick(request: pytest.FixtureRequest) -> AsyncIterator[UpstreamTransport]:
    """Each transport with a read timeout of 0.2 s."""
    made = create_transport(str(request.param), settings(read_timeout_s=0.2))
    yield made
    await made.aclose()


def post(target: bytes = b"/v1/x", body: bytes = b'{"a": 1}') -> UpstreamRequest:
    """A POST with a whole body."""
    return UpstreamRequest(b"POST", target, [(b"x-test", b"1")], body)


async def fetch(transport: UpstreamTransport, url: str, target: bytes = b"/v1/x") -> bytes:
    """POST and read the whole answer."""
    answer = await transport.request(url, post(target))
    try:
        return await answer.read()
    finally:
        await answer.aclose()


async def test_the_raw_target_is_sent_verbatim_after_the_base_path(
    transport: UpstreamTransport,
) -> None:
    heads: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        heads.append(await read_request(reader))
        writer.write(OK)

    async with raw_server(handler) as (url, _):
        await fetch(transport, f"{url}/base/", b"/v1/chat%2Fcompletions?q=%41&b=+")
    assert heads[0].startswith(b"POST /base/v1/chat%2Fcompletions?q=%41&b=+ HTTP/1.1\r\n")
    assert b"x-test: 1\r\n" in heads[0].lower()


async def test_a_refused_connection_sent_nothing(transport: UpstreamTransport) -> None:
    async with raw_server(lambda *_: asyncio.sleep(0)) as (url, _):
        pass  # closed: nothing listens on the port any more
    with pytest.raises(ConnectFailedError):
        await transport.request(url, post())


async def test_a_body_delimited_by_the_connection_close_is_complete(
    transport: UpstreamTransport,
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\npart one, ")
        await writer.drain()
        writer.write(b"part two")

    async with raw_server(handler) as (url, seen):
        assert await fetch(transport, url) == b"part one, part two"
        assert await fetch(transport, url) == b"part one, part two"
        assert seen == [0, 1]  # not kept: the engine closed it


async def test_a_body_cut_short_is_a_broken_answer(transport: UpstreamTransport) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly this")

    async with raw_server(handler) as (url, _):
        with pytest.raises(AnswerBrokenError):
            await fetch(transport, url)


async def test_streamed_bodies_are_chunked_or_sent_with_their_length(
    transport: UpstreamTransport,
) -> None:
    received: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            if b"transfer-encoding: chunked" in head.lower():
                received.append(head + await reader.readuntil(b"0\r\n\r\n"))
            else:
                received.append(head + await reader.readexactly(5))
            writer.write(OK)

    async def body() -> AsyncIterator[bytes]:
        yield b"abc"
        yield b"de"

    async with raw_server(handler) as (url, _):
        for length in (None, 5):
            request = UpstreamRequest(b"POST", b"/", [], body(), length)
            answer = await transport.request(url, request)
            assert await answer.read() == b"ok"
            await answer.aclose()
    chunked, sized = (r.lower() for r in received)
    assert chunked.endswith(b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
    assert b"content-length: 5\r\n" in sized
    assert sized.endswith(b"\r\n\r\nabcde")


async def test_the_read_timeout_covers_the_head_and_each_body_gap(
    quick: UpstreamTransport,
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        request = await read_request(reader)
        if b"/silent" in request:
            await asyncio.sleep(1)
            return
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for _ in range(6):  # 0.6 s in all, but never 0.2 s without data
            writer.write(b"1\r\nx\r\n")
            await writer.drain()
            await asyncio.sleep(0.1)
        if b"/stall" in request:
            await asyncio.sleep(1)
        writer.write(b"0\r\n\r\n")

    async with raw_server(handler) as (url, _):
        with pytest.raises(RequestFailedError):
            await quick.request(url, post(b"/silent"))
        assert await fetch(quick, url) == b"x" * 6
        answer = await quick.request(url, post(b"/stall"))
        with pytest.raises(AnswerBrokenError):
            async for _ in answer.stream():
                pass
        await answer.aclose()


async def test_a_request_that_timed_out_is_never_resent(quick: UpstreamTransport) -> None:
    # The engine may be working on it: resending would run it twice (and wait twice).
    requests: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        while True:
            requests.append(await read_request(reader))
            if len(requests) == 1:
                writer.write(OK)
                await writer.drain()
            else:
                await asyncio.sleep(1)

    async with raw_server(handler) as (url, connections):
        assert await fetch(quick, url) == b"ok"
        with pytest.raises(RequestFailedError):
            await quick.request(url, post())
        assert len(requests) == 2  # one each: the second was not resent
        assert len(connections) <= 2


async def test_bytes_after_an_answer_end_the_connection(transport: UpstreamTransport) -> None:
    # A second answer nobody asked for: reusing the connection would hand it to the next
    # request (response-queue poisoning). Each request must get its own answer.
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        while True:
            request = await read_request(reader)
            tag = request.split(b" ", 2)[1]
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(tag), tag))
            if n == 0:
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\n/smug!")
            await writer.drain()

    async with raw_server(handler) as (url, seen):
        assert await fetch(transport, url, b"/first") == b"/first"
        assert await fetch(transport, url, b"/second") == b"/second"
        assert await fetch(transport, url, b"/third") == b"/third"
        assert len(seen) >= 2


async def test_interim_answers_are_skipped(transport: UpstreamTransport) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n" + OK)

    async with raw_server(handler) as (url, _):
        assert await fetch(transport, url) == b"ok"


# The h1 transport's own behaviour.


def h1(read_timeout_s: float = 2.0) -> H1Transport:
    """The proxy's own transport."""
    return H1Transport(settings(read_timeout_s))


async def test_h1_reuses_one_kept_alive_connection() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        while True:
            await read_request(reader)
            writer.write(OK)

    async with raw_server(handler) as (url, seen):
        transport = h1()
        assert await fetch(transport, url) == b"ok"
        assert await fetch(transport, url) == b"ok"
        assert seen == [0]
        await transport.aclose()


async def test_h1_resends_once_on_a_fresh_connection_when_a_kept_alive_one_died() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(OK)  # then keep-alive; a second request on it is dropped unanswered
        await read_request(reader)

    async with raw_server(handler) as (url, seen):
        transport = h1()
        assert await fetch(transport, url) == b"ok"
        assert await fetch(transport, url) == b"ok"  # resent on a fresh connection
        assert seen == [0, 1]
        await transport.aclose()


async def test_h1_a_resend_that_fails_again_is_an_error() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        if n == 0:
            writer.write(OK)
            await read_request(reader)

    async with raw_server(handler) as (url, seen):
        transport = h1()
        await fetch(transport, url)
        with pytest.raises(RequestFailedError):
            await fetch(transport, url)
        assert seen == [0, 1]  # one resend, not more
        await transport.aclose()


async def test_h1_refuses_an_upgrade_nobody_asked_for() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\n\r\n")

    async with raw_server(handler) as (url, _):
        transport = h1()
        with pytest.raises(RequestFailedError):
            await fetch(transport, url)
        assert not transport.open
        await transport.aclose()


async def test_h1_a_slow_reader_pauses_the_engine_and_resumes_it() -> None:
    size = 4 * 1024 * 1024

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % size)
        writer.write(b"x" * size)
        await writer.drain()

    async with raw_server(handler) as (url, _):
        transport = h1()
        answer: UpstreamAnswer = await transport.request(url, post(b"/"))
        assert isinstance(answer, H1Answer)
        (conn,) = transport.open

        def paused() -> bool:  # a call, so that mypy does not narrow the attribute
            return bool(conn.reading_paused)

        for _ in range(500):
            if paused():
                break
            await asyncio.sleep(0.01)
        assert paused()
        assert answer._buffered < 2 * 1024 * 1024  # bounded, not the whole body
        total = 0
        async for chunk in answer.stream():
            total += len(chunk)
        assert total == size
        assert not paused()
        await answer.aclose()
        await transport.aclose()


async def test_h1_idle_connections_do_not_hold_the_connection_limit() -> None:
    # Engines that never close their end (gone from every endpoint set, or just idle):
    # their pooled connections must not keep new requests out.
    async def forever(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        while True:
            await read_request(reader)
            writer.write(OK)

    limited = TransportSettings(
        connect_timeout_s=2.0, read_timeout_s=2.0, max_connections=3, max_idle=4, keepalive_s=60
    )
    transport = H1Transport(limited)
    async with contextlib.AsyncExitStack() as stack:
        urls = [(await stack.enter_async_context(raw_server(forever)))[0] for _ in range(6)]
        for url in urls:
            assert await fetch(transport, url) == b"ok"
        assert len(transport.open) == 3  # the longest idle ones were closed to make room
    await transport.aclose()


async def test_h1_closes_idle_connections_after_the_keepalive_period() -> None:
    async def forever(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        while True:
            await read_request(reader)
            writer.write(OK)

    quick_idle = TransportSettings(
        connect_timeout_s=2.0, read_timeout_s=2.0, max_connections=10, max_idle=4, keepalive_s=0.1
    )
    transport = H1Transport(quick_idle)
    async with raw_server(forever) as (url, seen):
        assert await fetch(transport, url) == b"ok"
        assert len(transport.open) == 1
        await wait_until(lambda: not transport.open)
        assert await fetch(transport, url) == b"ok"  # a fresh one, not the stale one
        assert seen == [0, 1]
    await transport.aclose()
