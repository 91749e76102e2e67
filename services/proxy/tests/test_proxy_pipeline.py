"""The request pipeline against real TCP engines that misbehave in the ways it must survive.

Every test runs a real proxy on its own HTTP server; each request's accounting (model
activity, endpoint load) must be back to zero once it is answered, whatever happened.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from flexinfer_proxy.core.service import ProxyCore
from flexinfer_proxy.relay import event_end
from flexinfer_proxy.testing import make_model
from flexinfer_proxy.testing_raw import connect, post, raw_server, read_request
from flexinfer_proxy.testing_stack import ProxyStack, proxy_stack, upstreams, wait_until

JSON = {"content-type": "application/json"}

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
ANSWER = json.dumps({"object": "chat.completion", "choices": []}).encode()


def answer(body: bytes = ANSWER, extra: bytes = b"") -> bytes:
    """A 200 JSON answer framed by Content-Length."""
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n%scontent-length: %d\r\n\r\n%s"
        % (
            extra,
            len(body),
            body,
        )
    )


@asynccontextmanager
async def stack_on(tmp_path: Path, url: str, **overrides: Any) -> AsyncIterator[ProxyStack]:
    """A proxy for model ``m`` at ``url``."""
    async with proxy_stack(tmp_path, [make_model("m")], **overrides) as stack:
        await stack.set_endpoints("default/m", [url])
        yield stack


def settled(core: ProxyCore, url: str) -> bool:
    """No request counted in flight for the model or its endpoint at ``url``."""
    return core.activity.active("default/m") == 0 and core.loads.load(url) == 0


async def keep_answering(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int
) -> None:
    """An engine that answers every request on its connection."""
    while True:
        await read_request(reader)
        writer.write(answer())
        await writer.drain()


async def test_small_requests_are_answered_from_callbacks_on_one_connection(
    tmp_path: Path,
) -> None:
    async with (
        raw_server(keep_answering) as (url, connections),
        stack_on(tmp_path, url) as stack,
        httpx.AsyncClient(base_url=stack.url) as client,
    ):
        for _ in range(20):
            reply = await client.post("/v1/chat/completions", json=CHAT)
            assert reply.status_code == 200
            assert reply.content == ANSWER
        if stack.core.settings.upstream == "h1":  # the one transport that pools connections
            assert connections == [0]
        metrics = (await client.get("/metrics")).text
        route = 'route="/v1/chat/completions"'
        assert (
            f'flexinfer_proxy_requests_total{{code="200",model="default/m",{route}}} 20.0'
            in metrics
        )
        assert 'flexinfer_proxy_active_connections{model="default/m"} 0.0' in metrics
        assert settled(stack.core, url)


async def test_the_body_is_rewritten_and_the_path_prefix_stripped(tmp_path: Path) -> None:
    seen: list[bytes] = []

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        while True:
            seen.append(await read_request(reader))
            writer.write(answer())
            await writer.drain()

    async with (
        raw_server(record) as (url, _),
        proxy_stack(tmp_path, [make_model("m", served_name="served-m", aliases=["nick"])]) as stack,
        httpx.AsyncClient(base_url=stack.url) as client,
    ):
        await stack.set_endpoints("default/m", [url])
        for _ in range(2):
            body = {**CHAT, "model": "nick"}
            reply = await client.post("/model/nick/v1/chat/completions?x=1", json=body)
            assert reply.status_code == 200
        head, _, sent = seen[-1].partition(b"\r\n\r\n")
        assert head.startswith(b"POST /v1/chat/completions?x=1 HTTP/1.1")
        assert json.loads(sent)["model"] == "served-m"


async def test_a_kept_alive_connection_the_engine_closed_is_retried_fresh(
    tmp_path: Path,
) -> None:
    async def one_per_connection(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int
    ) -> None:
        await read_request(reader)
        writer.write(answer())
        await writer.drain()
        await read_request(reader)  # the next request on this connection: close unanswered

    async with (
        raw_server(one_per_connection) as (url, connections),
        stack_on(tmp_path, url) as stack,
        httpx.AsyncClient(base_url=stack.url) as client,
    ):
        for _ in range(3):
            reply = await client.post("/v1/chat/completions", json=CHAT)
            assert reply.status_code == 200
        assert len(connections) == 3
        assert settled(stack.core, url)


async def test_large_and_unframed_answers_are_relayed_whole(tmp_path: Path) -> None:
    big = json.dumps({"data": "x" * (512 * 1024)}).encode()

    count = 0

    async def varied(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        nonlocal count
        while True:
            await read_request(reader)
            count += 1
            if count % 2:
                writer.write(answer(big))
            else:  # chunked, no length: it could be a stream
                writer.write(
                    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                    b"3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n"
                )
            await writer.drain()

    async with (
        raw_server(varied) as (url, _),
        stack_on(tmp_path, url) as stack,
        httpx.AsyncClient(base_url=stack.url) as client,
    ):
        for _ in range(2):
            first = await client.post("/v1/chat/completions", json=CHAT)
            assert first.content == big
            second = await client.post("/v1/chat/completions", json=CHAT)
            assert second.content == b"abcdef"
        await wait_until(lambda: settled(stack.core, url))


async def test_an_answer_cut_short_cuts_the_client_connection(tmp_path: Path) -> None:
    served = 0

    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, index: int) -> None:
        nonlocal served
        while True:
            await read_request(reader)
            served += 1
            if served == 2:
                writer.write(answer(b"x" * 100)[:-50])  # the head and half the body, then close
                return
            writer.write(answer())
            await writer.drain()

    async with (
        raw_server(cut) as (url, _),
        stack_on(tmp_path, url) as stack,
        httpx.AsyncClient(base_url=stack.url) as client,
    ):
        assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
        try:
            await client.post("/v1/chat/completions", json=CHAT)
        except httpx.RemoteProtocolError:
            pass
        else:
            raise AssertionError("a cut answer must not reach the client as complete")
        await wait_until(lambda: settled(stack.core, url))
        assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200


async def test_an_engine_that_never_answers_is_a_502_after_the_read_timeout(
    tmp_path: Path,
) -> None:
    served = 0

    async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        nonlocal served
        while True:
            await read_request(reader)
            served += 1
            if served == 2:
                await asyncio.sleep(30)  # never answers the second request
            writer.write(answer())
            await writer.drain()

    async with (
        raw_server(stall) as (url, _),
        stack_on(tmp_path, url, read_timeout_s=0.5) as stack,
        httpx.AsyncClient(base_url=stack.url) as client,
    ):
        assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
        reply = await client.post("/v1/chat/completions", json=CHAT)
        assert reply.status_code == 502
        assert reply.json()["error"]["code"] == "upstream_error"
        assert settled(stack.core, url)


async def test_a_client_that_leaves_aborts_the_engine_request(tmp_path: Path) -> None:
    aborted = asyncio.Event()

    served = 0

    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, index: int) -> None:
        nonlocal served
        while True:
            await read_request(reader)
            served += 1
            if served == 2:
                if await reader.read(1) == b"":  # the proxy closed this connection
                    aborted.set()
                return
            writer.write(answer())
            await writer.drain()

    async with (
        raw_server(slow) as (url, _),
        stack_on(tmp_path, url) as stack,
    ):
        body = json.dumps(CHAT).encode()
        async with connect(stack.url) as conn:
            await conn.send(post("/v1/chat/completions", body))
            assert (await conn.response())[0] == 200
            await conn.send(post("/v1/chat/completions", body))
            await wait_until(lambda: stack.core.loads.load(url) == 1)
        await asyncio.wait_for(aborted.wait(), 5)
        await wait_until(lambda: settled(stack.core, url))


async def test_pipelined_requests_are_answered_in_order(tmp_path: Path) -> None:
    async with (
        upstreams(1) as [(_, url)],
        stack_on(tmp_path, url) as stack,
    ):
        bodies = [json.dumps({**CHAT, "user": str(i)}).encode() for i in range(5)]
        async with connect(stack.url) as conn:
            await conn.send(post("/v1/chat/completions", bodies[0]))
            assert (await conn.response())[0] == 200
            await conn.send(b"".join(post("/v1/chat/completions", b) for b in bodies))
            for _ in bodies:
                status, _, reply = await conn.response()
                assert status == 200
                assert json.loads(reply)["choices"][0]["message"]["content"] == "hello from u0"


async def test_errors_and_streams_leave_nothing_counted(
    tmp_path: Path,
) -> None:
    async with (
        upstreams(1) as [(_, url)],
        stack_on(tmp_path, url) as stack,
        httpx.AsyncClient(base_url=stack.url) as client,
    ):
        assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
        unknown = await client.post("/v1/chat/completions", json={**CHAT, "model": "nope"})
        assert unknown.status_code == 404
        broken = await client.post("/v1/chat/completions", content=b"{not json", headers=JSON)
        assert broken.status_code == 400
        stream = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
        assert stream.status_code == 200
        assert stream.text.rstrip().endswith("data: [DONE]")
        await wait_until(lambda: settled(stack.core, url))


def test_event_end_finds_the_last_whole_event() -> None:
    assert event_end(b"data: a\n\ndat") == len(b"data: a\n\n")
    assert event_end(b"dat") == 0
    assert event_end(b"data: a\r\n\r\ndata: b\r\n") == len(b"data: a\r\n\r\n")
    assert event_end(b"data: a\r\rdata: b\n\n") == len(b"data: a\r\rdata: b\n\n")


async def test_a_stream_cut_inside_an_event_ends_with_a_whole_error_event(tmp_path: Path) -> None:
    event = b'data: {"choices": [{"delta": {"content": "x"}}]}\n\n'

    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await read_request(reader)
        body = event * 2 + event[:3]  # the third event breaks off after "dat"
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n")
        writer.write(b"transfer-encoding: chunked\r\n\r\n%x\r\n%s\r\n" % (len(body), body))
        await writer.drain()

    async with (
        raw_server(cut) as (url, _),
        stack_on(tmp_path, url) as stack,
        httpx.AsyncClient(base_url=stack.url) as client,
    ):
        reply = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    assert reply.content.startswith(event * 2 + b"data: {")  # whole events, then the error
    last = reply.content.removeprefix(event * 2)
    assert last.endswith(b"\n\n")
    assert json.loads(last.removeprefix(b"data: "))["error"]["code"] == "upstream_error"
