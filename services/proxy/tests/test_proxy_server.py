"""The proxy's own HTTP/1.1 server: keep-alive, pipelining, bodies, errors, disconnects."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path
from typing import Any

import httpx
from starlette.types import Receive, Scope, Send

from flexinfer_proxy.serve import serve_proxy_in_background
from flexinfer_proxy.testing import make_model
from flexinfer_proxy.testing_raw import connect, post
from flexinfer_proxy.testing_stack import proxy_stack, upstreams, wait_until

JSON = {"content-type": "application/json"}

CHAT = b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}'


async def echo_app(scope: Scope, receive: Receive, send: Send) -> None:
    """Answers ``METHOD PATH BODY``; ``/stream`` answers two chunks; ``/boom`` raises."""
    if scope["type"] == "lifespan":
        while (message := await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    if scope["path"] == "/boom":
        raise RuntimeError("the app fails")
    if scope["path"] == "/slow":
        await asyncio.sleep(0.6)
    answer = b"%s %s %s" % (scope["method"].encode(), scope["path"].encode(), body)
    if scope["path"] == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"one,", "more_body": True})
        await send({"type": "http.response.body", "body": b"two", "more_body": False})
        return
    headers = [(b"content-type", b"text/plain")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": answer})


async def test_keep_alive_serves_several_requests_on_one_connection() -> None:
    async with serve_proxy_in_background(echo_app) as url, connect(url) as conn:
        for index in range(3):
            await conn.send(post("/a", b"n%d" % index))
            status, headers, body = await conn.response()
            assert (status, body) == (200, b"POST /a n%d" % index)
            assert headers["content-length"] == str(len(body))
            assert "date" in headers


async def test_pipelined_requests_are_answered_in_order() -> None:
    async with serve_proxy_in_background(echo_app) as url, connect(url) as conn:
        await conn.send(post("/1", b"x") + post("/stream", b"") + post("/3", b"zz"))
        assert (await conn.response())[2] == b"POST /1 x"
        assert (await conn.response())[2] == b"one,two"
        assert (await conn.response())[2] == b"POST /3 zz"


async def test_one_task_serves_a_connection_and_ends_with_it() -> None:
    """Keep-alive and pipelined requests run in turn in the connection's one task, which
    ends once the client closes."""
    seen: list[asyncio.Task[Any] | None] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            seen.append(asyncio.current_task())
        await echo_app(scope, receive, send)

    async with serve_proxy_in_background(app) as url:
        async with connect(url) as conn:
            await conn.send(post("/1", b"a"))
            assert (await conn.response())[2] == b"POST /1 a"
            await conn.send(post("/2", b"b") + post("/stream", b"") + post("/4", b"d"))
            bodies = [(await conn.response())[2] for _ in range(3)]
            assert bodies == [b"POST /2 b", b"one,two", b"POST /4 d"]
        worker = seen[0]
        assert worker is not None
        assert seen == [worker] * 4
        await wait_until(worker.done)
        assert not worker.cancelled()
        assert worker.exception() is None


async def test_chunked_request_body_and_streamed_answer() -> None:
    async with serve_proxy_in_background(echo_app) as url, connect(url) as conn:
        head = b"POST /c HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
        await conn.send(head + b"3\r\nabc\r\n")
        await asyncio.sleep(0.05)
        await conn.send(b"2\r\nde\r\n0\r\n\r\n")
        assert (await conn.response())[:3:2] == (200, b"POST /c abcde")
        await conn.send(post("/stream", b""))
        _status, headers, body = await conn.response()
        assert headers["transfer-encoding"] == "chunked"
        assert body == b"one,two"


async def test_expect_100_continue_gets_an_interim_answer() -> None:
    async with serve_proxy_in_background(echo_app) as url, connect(url) as conn:
        await conn.send(
            b"POST /e HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\nexpect: 100-continue\r\n\r\n"
        )
        interim = await asyncio.wait_for(conn.reader.readuntil(b"\r\n\r\n"), 5)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        await conn.send(b"body")
        assert (await conn.response())[2] == b"POST /e body"


async def test_malformed_request_is_a_400_and_the_connection_closes() -> None:
    async with serve_proxy_in_background(echo_app) as url, connect(url) as conn:
        await conn.send(b"NOT AN HTTP REQUEST\r\n\r\n")
        status, headers, body = await conn.response()
        assert status == 400
        assert headers["connection"] == "close"
        assert "message" in json.loads(body)["error"]
        assert await conn.closed()


async def test_an_endless_request_head_is_a_431() -> None:
    async with serve_proxy_in_background(echo_app) as url, connect(url) as conn:
        await conn.send(b"POST /a HTTP/1.1\r\nhost: x\r\n")
        for _ in range(100):
            with contextlib.suppress(ConnectionError):
                await conn.send(b"x-filler: " + b"y" * 1000 + b"\r\n")
        status, headers, _ = await conn.response()
        assert status == 431
        assert headers["connection"] == "close"


async def test_http_1_0_and_app_errors_close_the_connection() -> None:
    async with serve_proxy_in_background(echo_app) as url:
        async with connect(url) as conn:
            await conn.send(b"GET /old HTTP/1.0\r\n\r\n")
            assert (await conn.response())[2] == b"GET /old "
            assert await conn.closed()
        async with connect(url) as conn:
            await conn.send(post("/boom", b""))
            status, _, body = await conn.response()
            assert status == 500
            assert json.loads(body)["error"]["type"] == "server_error"
            assert await conn.closed()


async def test_proxy_routes_and_other_routes_share_the_port(tmp_path: Path) -> None:
    async with upstreams(1) as ups, proxy_stack(tmp_path, [make_model("tiny")]) as stack:
        await stack.set_endpoints("default/tiny", [ups[0][1]])
        async with httpx.AsyncClient(base_url=stack.url, timeout=5) as client:
            answer = await client.post("/v1/chat/completions", content=CHAT, headers=JSON)
            assert answer.json()["choices"][0]["message"]["content"] == "hello from u0"
            assert (await client.get("/v1/models")).json()["data"][0]["id"] == "tiny"
            assert (await client.get("/healthz")).status_code == 200
            assert "flexinfer_proxy_requests_total" in (await client.get("/metrics")).text


async def test_slow_body_is_a_408_and_oversize_a_413(tmp_path: Path) -> None:
    async with proxy_stack(
        tmp_path, [make_model("tiny")], body_timeout_s=0.3, max_body_bytes=2048
    ) as stack:
        async with connect(stack.url) as conn:
            await conn.send(post("/v1/chat/completions", CHAT)[:-10])  # the rest never comes
            status, _, body = await conn.response()
            assert status == 408
            assert json.loads(body)["error"]["code"] == "request_timeout"
        async with connect(stack.url) as conn:
            await conn.send(post("/v1/chat/completions", b"x" * 4000))
            assert (await conn.response())[0] == 413


async def test_client_disconnect_mid_stream_cancels_the_upstream(tmp_path: Path) -> None:
    async with (
        upstreams(1, chunks=50, chunk_delay_s=0.05) as ups,
        proxy_stack(tmp_path, [make_model("tiny")]) as stack,
    ):
        fake, upstream_url = ups[0]
        await stack.set_endpoints("default/tiny", [upstream_url])
        body = CHAT[:-1] + b', "stream": true}'
        async with connect(stack.url) as conn:
            await conn.send(post("/v1/chat/completions", body))
            head = await asyncio.wait_for(conn.reader.readuntil(b"data: "), 5)
            assert b"200 OK" in head
        await wait_until(lambda: fake.aborted == 1)
        await wait_until(lambda: stack.core.activity.active("default/tiny") == 0)
        assert not fake.finished_at


async def test_idle_connections_close_after_the_keepalive_timeout_busy_ones_do_not() -> None:
    async with serve_proxy_in_background(echo_app, keepalive_s=0.3) as url, connect(url) as conn:
        await conn.send(post("/slow", b""))  # runs longer than the keep-alive timeout
        assert (await conn.response())[2] == b"POST /slow "
        await conn.send(post("/again", b""))
        assert (await conn.response())[2] == b"POST /again "
        started = asyncio.get_running_loop().time()
        assert await conn.closed()
        assert asyncio.get_running_loop().time() - started < 2


async def test_a_request_that_lands_as_the_idle_deadline_falls_due_is_served() -> None:
    # A stalled event loop (a long GC pause, a starved CPU) wakes with the idle deadline
    # past due in the same turn as the client's next request arrives: the proxy must
    # serve it, not reset the connection under it.
    keepalive = 0.3
    async with (
        serve_proxy_in_background(echo_app, keepalive_s=keepalive) as url,
        connect(url) as conn,
    ):
        await conn.send(post("/a", b"one"))
        assert (await conn.response())[2] == b"POST /a one"  # the idle timer runs now
        loop = asyncio.get_running_loop()
        stalled = loop.create_future()

        def stall() -> None:
            # This is the stall under test, not a wait for something to happen: the
            # loop is blocked past the deadline, and a busier machine only blocks it
            # longer, which leaves the deadline just as due.
            time.sleep(keepalive * 2)
            stalled.set_result(None)

        loop.call_soon(stall)
        await stalled  # resumes in the turn whose timers include the due deadline
        await conn.send(post("/b", b"two"))
        assert (await conn.response())[2] == b"POST /b two"
        assert await conn.closed()  # and once idle for real, it still closes
