"""Drive a proxy with raw client bytes and judge it (``differential_oracle``).

One case: write the bytes on a fresh connection, read the answers to the requests h11
finds in them, then see what the proxy does with what follows (half-closing after an
unfinished or rejected request, so that a proxy that waits for more bytes gets its EOF).
Then a well-behaved control client sends its own request through the same proxy, on the
engine connection the pool hands out next, and must get its own answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from flexinfer_proxy.testing import make_model
from flexinfer_proxy.testing_stack import ProxyStack
from flexinfer_testing.differential_oracle import Observed, violations
from flexinfer_testing.http_reference import Answer, AnswerReader, parse_requests
from flexinfer_testing.proxy_servers import Server, served_proxy
from flexinfer_testing.recording_upstream import (
    Recorded,
    RecordingUpstream,
    answer_seq,
    recording_upstream,
)

ANSWER_TIMEOUT_S = 5.0
"""How long an answer (or a close) may take: generous for a loaded 2-core machine, and
only spent when the proxy misbehaves."""
CONTROL_TIMEOUT_S = 30.0
"""The control request's answer: it never waits on anything hostile, but may wait out one
endpoint cooldown (5 s) on a loaded 2-core machine; a proxy that lost it still shows."""
MODEL_KEY = "default/tiny"


@dataclass(frozen=True)
class ControlResult:
    """What the well-behaved client after a case got."""

    nonce: bytes
    answer: Answer | None
    own: bool
    """Its answer named its own request, which reached the engine."""
    recorded: Recorded | None
    closed: bool = False
    """The proxy closed the connection (else it answered, or the wait timed out)."""
    waited_s: float = 0.0

    def describe(self) -> str:
        """One line for a report."""
        if self.answer is None:
            reached = (
                f"reached the engine on conn {self.recorded.conn}"
                if self.recorded
                else ("never reached the engine")
            )
            how = "closed by the proxy" if self.closed else "timed out"
            return f"control: no answer, {how} after {self.waited_s:.1f} s ({reached})"
        conn = self.recorded.conn if self.recorded else None
        verdict = "its own answer" if self.own else "NOT its own answer"
        return f"control: {self.answer.status} {self.answer.body[:100]!r} ({verdict}, conn {conn})"


@dataclass(frozen=True)
class CaseRun:
    """One case: what was sent, what happened, and what was wrong with it."""

    data: bytes
    observed: Observed
    control: ControlResult
    problems: list[str]
    state: str = ""
    """The proxy's view of the model when the control failed (queue, endpoints, errors)."""

    def describe(self) -> str:
        """A multi-line account for a report or an assertion message."""
        seen = self.observed
        lines = [
            f"sent: {self.data!r}",
            f"h11: {len(seen.parsed.requests)} request(s), tail {seen.parsed.tail}"
            + (f" ({seen.parsed.error})" if seen.parsed.error else ""),
            "answers: "
            + (", ".join(f"{a.status} {a.body[:100]!r}" for a in seen.answers) or "none")
            + f"; closed={seen.closed} hung={seen.hung}",
        ]
        lines += [
            f"forwarded: conn {r.conn} {r.method!r} {r.target!r} {r.body[:80]!r}"
            for r in seen.forwarded
        ]
        lines.append(self.control.describe())
        lines += [f"PROBLEM: {p}" for p in self.problems]
        if self.state:
            lines.append(f"proxy state: {self.state}")
        return "\n".join(lines)


@asynccontextmanager
async def _connection(url: str) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()


async def _send(writer: asyncio.StreamWriter, data: bytes) -> None:
    with contextlib.suppress(ConnectionError):
        writer.write(data)
        await writer.drain()


async def _half_close(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        if writer.can_write_eof():
            writer.write_eof()


async def exchange(
    url: str, upstream: RecordingUpstream, data: bytes, *, eof: bool = True
) -> Observed:
    """Send ``data`` on a fresh connection to the proxy at ``url``; what happened.

    ``eof``: half-close after an unfinished or rejected request (else the proxy must end
    it by itself, by a timeout).
    """
    parsed = parse_requests(data)
    mark, errors = len(upstream.requests), len(upstream.protocol_errors)
    hung = False
    async with _connection(url) as (reader, writer):
        await _send(writer, data)
        answers = AnswerReader(reader)
        got: list[Answer] = []
        for request in parsed.requests:
            answer = await answers.next(ANSWER_TIMEOUT_S, request.method)
            if answer is None:
                hung = not answers.closed and answers.garbage is None
                break
            got.append(answer)
        if not hung and not answers.closed and parsed.tail != "clean":
            if eof and parsed.tail != "after_close":
                await _half_close(writer)
            extra = await answers.next(ANSWER_TIMEOUT_S)
            if extra is not None:
                got.append(extra)
            hung = extra is None and not answers.closed and answers.garbage is None
    return Observed(
        parsed=parsed,
        answers=got,
        closed=answers.closed,
        hung=hung,
        garbage=answers.garbage,
        forwarded=upstream.since(mark),
        upstream_errors=upstream.protocol_errors[errors:],
    )


def control_request(nonce: str) -> bytes:
    """A well-formed chat completion whose body carries ``nonce``."""
    body = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": nonce}]}).encode()
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: proxy\r\ncontent-type: application/json\r\n"
    )
    return head + b"content-length: %d\r\n\r\n%s" % (len(body), body)


async def control(url: str, upstream: RecordingUpstream) -> ControlResult:
    """A well-behaved client's request: did it reach the engine and get its own answer?"""
    nonce = f"control-{uuid.uuid4().hex}"
    started = time.monotonic()
    async with _connection(url) as (reader, writer):
        await _send(writer, control_request(nonce))
        answers = AnswerReader(reader)
        answer = await answers.next(CONTROL_TIMEOUT_S)
    waited = time.monotonic() - started
    mine = [r for r in upstream.requests if nonce.encode() in r.body]
    recorded = mine[0] if len(mine) == 1 else None
    own = (
        answer is not None
        and answer.status == 200
        and recorded is not None
        and answer_seq(answer.body) == recorded.seq
    )
    return ControlResult(nonce.encode(), answer, own, recorded, answers.closed, waited)


async def run_case(
    url: str, upstream: RecordingUpstream, data: bytes, *, eof: bool = True
) -> CaseRun:
    """One case and its control request, judged."""
    mark = len(upstream.requests)
    observed = await exchange(url, upstream, data, eof=eof)
    checked = await control(url, upstream)
    # Requests forwarded late (after the answers were read) are in by now: the control
    # request queued behind them on the engine connection the pool handed out again.
    observed.forwarded = [r for r in upstream.since(mark) if checked.nonce not in r.body]
    problems = violations(observed)
    if not checked.own:
        problems.append(f"the control client did not get its own answer ({checked.describe()})")
    return CaseRun(data, observed, checked, problems)


@dataclass(frozen=True)
class ProxyUnderTest:
    """A proxy serving the model ``tiny``, each case from a fresh recording engine."""

    server: Server
    stack: ProxyStack

    @property
    def url(self) -> str:
        """The proxy's base URL."""
        return self.stack.url

    async def run(self, data: bytes, *, eof: bool = True) -> CaseRun:
        """``run_case`` against a new engine: what one case did cannot spill into the next
        (a poisoned pooled connection belongs to the engine address it was opened to)."""
        async with recording_upstream() as upstream:
            await self.stack.set_endpoints(MODEL_KEY, [upstream.url])
            run = await run_case(self.url, upstream, data, eof=eof)
            if not run.control.own:
                run = replace(run, state=self.state())
            return run

    def state(self) -> str:
        """What the proxy knows of the model now: for a report on a lost control request."""
        core = self.stack.core
        table = core.table
        errors = {
            "/".join(sample.labels.values()): sample.value
            for metric in core.metrics.upstream_errors.collect()
            for sample in metric.samples
            if sample.name.endswith("_total")
        }
        return (
            f"revision {table.revision(MODEL_KEY)} (stack {self.stack.revision}), "
            f"endpoints {table.urls(MODEL_KEY)}, usable {table.usable(MODEL_KEY)}, "
            f"queue depth {core.queue.depth(MODEL_KEY)}, upstream errors {errors}"
        )


@asynccontextmanager
async def proxy_under_test(
    tmp_path: Path, server: Server, **overrides: Any
) -> AsyncIterator[ProxyUnderTest]:
    """A proxy (protocol ``server``) serving the model ``tiny``.

    Short body and keep-alive timeouts: a proxy waiting on an unfinished request must end
    it well within ANSWER_TIMEOUT_S.
    """
    overrides.setdefault("body_timeout_s", 0.5)
    async with served_proxy(
        tmp_path, [make_model("tiny")], server, keepalive_s=1.0, **overrides
    ) as stack:
        yield ProxyUnderTest(server, stack)
