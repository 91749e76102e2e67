"""The proxy's upstream client: stale keep-alive resends, flow control, body framings."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from flexinfer_proxy.testing_raw import OK, raw_server, read_request
from flexinfer_proxy.upstream import (
    RequestFailedError,
    UpstreamPool,
    UpstreamReadError,
    UpstreamResponse,
)


def pool() -> UpstreamPool:
    """A small pool with short timeouts."""
    return UpstreamPool(connect_timeout=2, read_timeout=2, max_connections=10, max_idle=4)


async def fetch(client: UpstreamPool, url: str) -> tuple[UpstreamResponse, bytes]:
    """POST to ``url`` and read the whole answer."""
    response = await client.request(url, b"POST", b"/v1/x", [], b'{"a": 1}')
    try:
        body = b"".join([chunk async for chunk in response.aiter_raw()])
    finally:
        await response.aclose()
    return response, body


async def test_a_stale_keepalive_connection_is_resent_once_on_a_fresh_one() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(OK)  # then keep-alive; a second request on it is dropped unanswered
        await read_request(reader)

    async with raw_server(handler) as (url, seen), pool() as client:
        assert (await fetch(client, url))[1] == b"ok"
        assert (await fetch(client, url))[1] == b"ok"  # resent on a fresh connection
        assert seen == [0, 1]


async def test_a_resend_that_fails_again_is_an_error() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        if n == 0:
            writer.write(OK)
            await read_request(reader)

    async with raw_server(handler) as (url, seen), pool() as client:
        await fetch(client, url)
        with pytest.raises(RequestFailedError):
            await fetch(client, url)
        assert seen == [0, 1]  # one resend, not more


async def test_a_slow_reader_pauses_the_upstream_and_resumes_it() -> None:
    size = 4 * 1024 * 1024

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % size)
        writer.write(b"x" * size)
        await writer.drain()

    async with raw_server(handler) as (url, _), pool() as client:
        response = await client.request(url, b"POST", b"/", [], b"")
        conn = response._conn
        assert conn is not None

        def paused() -> bool:  # a call, so that mypy does not narrow the attribute
            return bool(conn.reading_paused)

        for _ in range(100):
            if paused():
                break
            await asyncio.sleep(0.01)
        assert paused()
        assert response._buffered < 2 * 1024 * 1024  # bounded, not the whole body
        total = 0
        async for chunk in response.aiter_raw():
            total += len(chunk)
        assert total == size
        assert not paused()
        await response.aclose()


async def test_a_body_delimited_by_the_connection_close_is_complete() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\npart one, ")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"part two")

    async with raw_server(handler) as (url, _), pool() as client:
        response, body = await fetch(client, url)
        assert body == b"part one, part two"
        assert response.complete
        assert client.open_connections == 0  # not kept: the server closed it


async def test_a_body_cut_short_is_a_read_error() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly this")

    async with raw_server(handler) as (url, _), pool() as client:
        with pytest.raises(UpstreamReadError):
            await fetch(client, url)


async def test_a_streamed_request_body_is_sent_chunked() -> None:
    received: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        received.append(head + await reader.readuntil(b"0\r\n\r\n"))
        writer.write(OK)

    async def body() -> AsyncIterator[bytes]:
        yield b"abc"
        yield b"de"

    async with raw_server(handler) as (url, _), pool() as client:
        response = await client.request(url, b"POST", b"/", [], body())
        await response.aclose()
        assert b"transfer-encoding: chunked" in received[0]
        assert received[0].endswith(b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")


def quick_pool() -> UpstreamPool:
    """A pool whose read timeout is 0.2 s."""
    return UpstreamPool(connect_timeout=2, read_timeout=0.2, max_connections=10, max_idle=4)


async def test_the_read_timeout_covers_the_head_and_each_body_gap() -> None:
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

    async with raw_server(handler) as (url, _), quick_pool() as client:
        with pytest.raises(RequestFailedError):
            await client.request(url, b"POST", b"/silent", [], b"")
        assert (await fetch(client, url))[1] == b"x" * 6
        response = await client.request(url, b"POST", b"/stall", [], b"")
        with pytest.raises(TimeoutError):
            async for _ in response.aiter_raw():
                pass
        await response.aclose()


async def test_a_request_that_timed_out_on_a_kept_alive_connection_is_not_resent() -> None:
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

    async with raw_server(handler) as (url, connections), quick_pool() as client:
        assert (await fetch(client, url))[1] == b"ok"
        with pytest.raises(RequestFailedError):
            await client.request(url, b"POST", b"/v1/x", [], b"{}")
        assert len(requests) == 2
        assert connections == [0]
