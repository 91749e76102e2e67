"""The defects a hostile client found (issue 9), each refused with nothing forwarded.

Every test drives a real proxy over raw sockets against a recording engine that answers
each request with its own request line, so a poisoned connection would show as a client
reading someone else's answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import resource
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from flexinfer_proxy.testing import make_model
from flexinfer_proxy.testing_raw import connect, post, raw_server, read_request
from flexinfer_proxy.testing_stack import ProxyStack, proxy_stack

CHAT = b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}'
SMUGGLE = "/model/tiny/v1/models%20HTTP/1.1%0D%0AHost:%20x%0D%0A%0D%0APOST%20/v1/chat/completions"


class Recorder:
    """An engine that records every request and answers with its request line."""

    def __init__(self) -> None:
        self.requests: list[bytes] = []

    async def handle(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int
    ) -> None:
        """Serve one connection, keep-alive."""
        while True:
            request = await read_request(reader)
            self.requests.append(request)
            line = request.split(b"\r\n", 1)[0]
            body = json.dumps({"echo": line.decode("latin-1")}).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n%s" % (len(body), body)
            )
            await writer.drain()

    def lines(self) -> list[bytes]:
        """The request lines received."""
        return [r.split(b"\r\n", 1)[0] for r in self.requests]


@asynccontextmanager
async def recorded(tmp_path: Path, **settings: Any) -> AsyncIterator[tuple[ProxyStack, Recorder]]:
    """A proxy for model ``tiny`` (reference backend) in front of a Recorder."""
    recorder = Recorder()
    async with (
        raw_server(recorder.handle) as (url, _),
        proxy_stack(tmp_path, [make_model("tiny")], **settings) as stack,
    ):
        await stack.set_endpoints("default/tiny", [url])
        yield stack, recorder


async def exchange(url: str, data: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send raw bytes on a new connection; the first answer."""
    async with connect(url) as conn:
        await conn.send(data)
        return await conn.response()


async def assert_own_answer(url: str, recorder: Recorder) -> None:
    """A well-behaved client gets the answer to its own request."""
    status, _, body = await exchange(url, post("/v1/chat/completions?me=1", CHAT))
    assert status == 200
    assert json.loads(body)["echo"] == "POST /v1/chat/completions?me=1 HTTP/1.1"


@pytest.mark.parametrize("auth", [False, True])
async def test_an_encoded_request_line_is_refused_and_nothing_is_forwarded(
    tmp_path: Path, auth: bool
) -> None:
    tokens = ["sk-security-test"] if auth else []
    async with recorded(tmp_path, auth_tokens=tokens) as (stack, recorder):
        extra = b"authorization: Bearer sk-security-test\r\n" if auth else b""
        status, _, body = await exchange(stack.url, post(SMUGGLE, CHAT, extra))
        assert status == 400
        assert "control character, a space or a NUL" in json.loads(body)["error"]["message"]
        assert recorder.requests == []
        if not auth:
            await assert_own_answer(stack.url, recorder)
            assert recorder.lines() == [b"POST /v1/chat/completions?me=1 HTTP/1.1"]


@pytest.mark.parametrize(
    ("target", "status"),
    [
        ("/model/tiny/v1/chat/completions%0d%0aX-Evil:%201", 400),
        ("/v1/chat/completions%0D", 400),
        ("/v1/chat/completions?q=%00", 400),
        ("/v1/chat/completions?q=a%20b", 400),
        ("/model/ti%0Any/v1/chat/completions", 400),
        ("/model/tiny/v1/chat/completions%", 400),
        ("/model/tiny/v1/chat/completions%zz", 400),
        ("/model//v1/chat/completions", 400),
        # Not a route at all, once decoded: 404, as any other path no backend serves.
        ("/model/tiny/%2e%2e/%2e%2e/admin", 404),
        ("/model/tiny/../../admin", 404),
        ("/model/tiny/v1//chat/completions", 404),
        ("/model/tiny/v1/chat/completions%5C..", 404),
        ("/v1/chat/completions/", 404),
    ],
)
async def test_hostile_targets_are_refused(tmp_path: Path, target: str, status: int) -> None:
    async with recorded(tmp_path) as (stack, recorder):
        got, _, body = await exchange(stack.url, post(target, CHAT))
        assert got == status, body
        assert set(json.loads(body)["error"]) == {"message", "type", "param", "code"}
        assert recorder.requests == []


async def test_an_absolute_form_target_is_served_as_its_path(tmp_path: Path) -> None:
    async with recorded(tmp_path) as (stack, recorder):
        status, _, body = await exchange(stack.url, post("http://engine/v1/chat/completions", CHAT))
        assert status == 200
        assert json.loads(body)["echo"] == "POST /v1/chat/completions HTTP/1.1"
        status, _, _ = await exchange(stack.url, post("http://engine/model/tiny/sleep", CHAT))
        assert status == 404
        assert len(recorder.requests) == 1


@pytest.mark.parametrize(
    "target",
    ["/model/tiny/sleep?level=2", "/model/tiny/wake_up", "/model/tiny/v1/embeddings"],
)
async def test_only_the_backends_inference_routes_are_forwarded(
    tmp_path: Path, target: str
) -> None:
    async with recorded(tmp_path) as (stack, recorder):
        status, headers, body = await exchange(stack.url, post(target, CHAT))
        assert status == 404
        assert headers["content-type"] == "application/json"
        error = json.loads(body)["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert recorder.requests == []
        await assert_own_answer(stack.url, recorder)


async def test_unknown_routes_and_methods_answer_in_openai_shape(tmp_path: Path) -> None:
    async with recorded(tmp_path) as (stack, recorder):
        for request, status in (
            (post("/v1/sleep", CHAT), 404),
            (post("/admin", CHAT), 404),
            (b"GET /v1/chat/completions HTTP/1.1\r\nhost: x\r\n\r\n", 405),
            (b"PUT /model/tiny/v1/completions HTTP/1.1\r\nhost: x\r\n\r\n", 405),
            (b"GET /model/tiny/sleep HTTP/1.1\r\nhost: x\r\n\r\n", 404),
            (b"GET /v1/unknown HTTP/1.1\r\nhost: x\r\n\r\n", 404),
            (post("/v1/models", b""), 405),
            (b"DELETE /v1/models HTTP/1.1\r\nhost: x\r\n\r\n", 405),
        ):
            got, _, body = await exchange(stack.url, request)
            assert got == status, request
            assert set(json.loads(body)["error"]) == {"message", "type", "param", "code"}
        assert recorder.requests == []


# The next tests check the proxy's own HTTP server's framing (uvicorn's stock protocols,
# which the other tests also run on, frame requests their own way).


async def test_a_huge_header_is_431_at_the_limit_without_growing_the_process(
    tmp_path: Path,
) -> None:
    async with recorded(tmp_path, server="flexinfer") as (stack, recorder):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        async with connect(stack.url) as conn:
            await conn.send(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-big: ")
            sent = 0
            with contextlib.suppress(ConnectionError):
                while sent < 24 * 1024 * 1024:
                    await conn.send(b"y" * 65536)
                    sent += 65536
            status, headers, _ = await conn.response()
        grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        assert status == 431
        assert headers["connection"] == "close"
        assert grown_kib < 8 * 1024  # 24 MiB were sent: the head was never buffered
        assert recorder.requests == []


async def test_a_lone_surrogate_is_a_400_with_few_log_lines(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with recorded(tmp_path) as (stack, recorder):
        caplog.set_level(logging.DEBUG)
        caplog.clear()
        for body in (b'{"model": "\\ud800"}', b'{"model": "tiny", "messages": ["\\udfff"]}'):
            status, _, answer = await exchange(stack.url, post("/v1/chat/completions", body))
            assert status in (200, 400), answer
            json.loads(answer)  # an answer, not a broken connection
        ours = [r for r in caplog.records if r.name.startswith("flexinfer")]
        assert len(ours) <= 4, [r.getMessage() for r in ours]
        # The second one is valid JSON with a valid model: it went on, escape intact.
        assert len(recorder.requests) == 1
        assert b'"\\udfff"' in recorder.requests[0]


@pytest.mark.parametrize(
    "raw",
    [
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
        b"zz\r\n" + CHAT + b"\r\n0\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: gzip\r\n\r\n" + CHAT,
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n"
        b"transfer-encoding: chunked\r\n\r\n" % len(CHAT) + CHAT,
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n"
        b"content-length: 5\r\n\r\n" % len(CHAT) + CHAT,
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-bad: a\x01b\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-fold: a\r\n b\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\nhost: x\n\n",
        b"POST /v1/chat/completions HTTP/1.1\r\ntransfer-encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}",
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: a\r\nhost: b\r\ncontent-length: 2\r\n\r\n{}",
    ],
    ids=[
        "bad-chunk-size",
        "te-gzip",
        "cl-and-te",
        "two-lengths",
        "control-char",
        "obs-fold",
        "lf",
        "te-gzip-chunked",
        "no-host",
        "two-hosts",
    ],
)
async def test_framing_errors_are_400_and_never_run_upstream(tmp_path: Path, raw: bytes) -> None:
    async with recorded(tmp_path, server="flexinfer") as (stack, recorder):
        async with connect(stack.url) as conn:
            await conn.send(raw)
            status, headers, _ = await conn.response()
            assert await conn.closed()
        assert status == 400
        assert headers["connection"] == "close"
        assert recorder.requests == []
        await assert_own_answer(stack.url, recorder)


async def test_a_body_cut_short_by_the_client_is_400_and_not_forwarded_whole(
    tmp_path: Path,
) -> None:
    async with recorded(tmp_path, server="flexinfer") as (stack, recorder):
        async with connect(stack.url) as conn:
            head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 500\r\n\r\n"
            await conn.send(head + CHAT)
            conn.writer.write_eof()  # half-close: the rest never comes
            status, _, _ = await conn.response()
        assert status == 400
        assert recorder.requests == []


async def test_malformed_bytes_after_a_request_wait_for_its_answer(tmp_path: Path) -> None:
    async with recorded(tmp_path, server="flexinfer") as (stack, recorder):
        async with connect(stack.url) as conn:
            await conn.send(post("/v1/chat/completions", CHAT) + b"\x00\x01\x02 garbage\r\n\r\n")
            first, _, body = await conn.response()
            second, headers, _ = await conn.response()
            assert await conn.closed()
        assert first == 200
        assert json.loads(body)["echo"] == "POST /v1/chat/completions HTTP/1.1"
        assert (second, headers["connection"]) == (400, "close")
        assert len(recorder.requests) == 1


async def test_data_after_a_connection_close_request_is_ignored(tmp_path: Path) -> None:
    async with recorded(tmp_path, server="flexinfer") as (stack, recorder):
        async with connect(stack.url) as conn:
            await conn.send(post("/v1/chat/completions", CHAT, b"connection: close\r\n") + b"JUNK")
            status, _, body = await conn.response()
            assert await conn.closed()
        assert status == 200
        assert json.loads(body)["echo"] == "POST /v1/chat/completions HTTP/1.1"
        assert len(recorder.requests) == 1


async def test_the_clients_token_stays_with_the_proxy(tmp_path: Path) -> None:
    async with recorded(tmp_path, auth_tokens=["sk-security-test"]) as (stack, recorder):
        extra = b"authorization: Bearer sk-security-test\r\n"
        status, _, _ = await exchange(stack.url, post("/v1/chat/completions", CHAT, extra))
        assert status == 200
        assert b"sk-security-test" not in recorder.requests[0]
