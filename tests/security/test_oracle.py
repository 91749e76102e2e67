"""The differential machinery itself: h11 as reference, the oracle's rules, and proof that
the suite catches request splitting and queue poisoning in a proxy that has them (a tiny
naive proxy with issue 9's defect), and stays quiet for one that forwards soundly.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from urllib.parse import unquote_to_bytes

import pytest

from flexinfer_testing.differential import run_case
from flexinfer_testing.differential_oracle import (
    expected_targets,
    must_reject,
    same_body,
    strip_model_prefix,
)
from flexinfer_testing.hostile_corpus import BODY, SLOW_BODY, request
from flexinfer_testing.http_reference import AnswerReader, ParsedRequest, parse_requests
from flexinfer_testing.recording_upstream import RecordingUpstream, answer_seq, recording_upstream

SPLIT = b"/model/tiny/v1/models%20HTTP/1.1%0D%0AHost:%20x%0D%0A%0D%0APOST%20/v1/chat/completions"


def test_h11_reference_tails() -> None:
    assert parse_requests(request()).tail == "clean"
    assert parse_requests(request() + request()).tail == "clean"
    assert len(parse_requests(request() + request()).requests) == 2
    assert parse_requests(request()[:-5]).tail == "partial"
    assert parse_requests(request()[:20]).tail == "partial"
    assert parse_requests(b"GET /\r\n\r\n").tail == "error"
    closing = request(headers=b"connection: close\r\n") + request()
    assert parse_requests(closing).tail == "after_close"
    connect = parse_requests(request(b"engine:80", method=b"CONNECT") + request())
    assert [r.method for r in connect.requests] == [b"CONNECT", b"POST"]  # no tunnel


def _post(target: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> ParsedRequest:
    return ParsedRequest(b"POST", target, b"1.1", headers or [(b"host", b"p")], b"")


def test_oracle_rules() -> None:
    assert strip_model_prefix(b"/model/tiny/v1/completions?x=1") == b"/v1/completions?x=1"
    assert strip_model_prefix(b"/model/ti%2Fny/v1/x") == b"/v1/x"  # split on raw bytes
    assert strip_model_prefix(b"/v1/completions") == b"/v1/completions"
    assert expected_targets(b"/v1/completions?") == {b"/v1/completions?", b"/v1/completions"}
    assert expected_targets(b"http://e/model/tiny/v1/completions") == {
        b"http://e/model/tiny/v1/completions",
        b"/v1/completions",
    }
    assert must_reject(_post(b"/v1/chat/completions")) is None
    assert must_reject(_post(b"/model/tiny/v1/completions?api-version=1")) is None
    for target in (b"/v1/chat/completions%0d", b"/v1/completions?q=a%20b", b"/model/t%00/v1/x"):
        assert must_reject(_post(target)) is not None, target
    for target in (b"/model/tiny/sleep", b"/v1/%2e%2e/sleep", b"/v1/models", b"*"):
        assert "route" in (must_reject(_post(target)) or ""), target
    assert must_reject(_post(b"/v1/completions", [(b"x", b"a\x01")])) is not None
    assert must_reject(_post(b"/v1/completions", [(b"x", b"a\tb")])) is None
    assert same_body(b'{"model":"a","x":1}', b'{"x": 1, "model": "b"}')
    assert not same_body(b'{"model":"a","x":1}', b'{"model":"a","x":2}')
    assert not same_body(b"abc", b"abd")


@contextlib.asynccontextmanager
async def naive_proxy(upstream: RecordingUpstream) -> AsyncIterator[str]:
    """A proxy with issue 9's defect: it decodes the target and writes it raw upstream, on
    one kept-alive engine connection, and relays the next answer read from it."""
    host, port = upstream.url.removeprefix("http://").split(":")
    engine_reader, engine_writer = await asyncio.open_connection(host, int(port))
    answers = AnswerReader(engine_reader)
    lock = asyncio.Lock()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        parsed = parse_requests(await reader.read(65536))
        sent = parsed.requests[0]
        target = unquote_to_bytes(strip_model_prefix(sent.target))
        head = b"POST %s HTTP/1.1\r\nhost: engine\r\ncontent-length: %d\r\n\r\n"
        async with lock:
            engine_writer.write(head % (target, len(sent.body)) + sent.body)
            answer = await answers.next(5.0)
        assert answer is not None
        status = b"HTTP/1.1 %d OK\r\ncontent-length: %d\r\n\r\n" % (answer.status, len(answer.body))
        writer.write(status + answer.body)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        await server.wait_closed()
        engine_writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await engine_writer.wait_closed()


async def test_the_suite_catches_splitting_and_poisoning() -> None:
    async with recording_upstream() as upstream, naive_proxy(upstream) as url:
        sound = await run_case(url, upstream, request(b"/model/tiny/v1/chat/completions"))
        assert sound.problems == [], sound.describe()
        assert sound.observed.forwarded[0].body == BODY
        split = await run_case(url, upstream, request(SPLIT, SLOW_BODY))
    problems = "\n".join(split.problems)
    assert "must be rejected" in problems
    assert "forwarded with no answer relayed" in problems
    assert "control client did not get its own answer" in problems  # the queue is poisoned
    smuggled = [r for r in split.observed.forwarded if SLOW_BODY in r.body]
    assert split.control.answer is not None
    assert len(smuggled) == 1
    assert answer_seq(split.control.answer.body) == smuggled[0].seq  # the attacker's answer


@pytest.mark.parametrize("data", [request(), request(b"/v1/completions?x=1")])
async def test_a_sound_forwarder_passes(data: bytes) -> None:
    async with recording_upstream() as upstream, naive_proxy(upstream) as url:
        run = await run_case(url, upstream, data)
    assert run.problems == [], run.describe()
    assert run.control.own
