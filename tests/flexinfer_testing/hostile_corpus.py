"""Hostile HTTP/1.1 requests, as raw bytes, for the differential proxy suite.

Each case is judged by ``differential_oracle``; ``expect`` adds what the case is about:
"forward" (a sound request: it must reach the engine, so the suite cannot pass by
refusing everything) or "reject" (it must get a 4xx answer, of ``status`` when given,
and reach nothing).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from flexinfer_testing.recording_upstream import SLOW_MARKER

CHAT = b"/v1/chat/completions"
BODY = b'{"model":"tiny","messages":[{"role":"user","content":"hi"}]}'
SLOW_BODY = json.dumps(
    {"model": "tiny", "messages": [{"role": "user", "content": SLOW_MARKER.decode()}]}
).encode()
"""The body of a smuggled request: the engine answers it late (see recording_upstream)."""


@dataclass(frozen=True)
class Case:
    """One hostile input."""

    id: str
    data: bytes
    expect: Literal["judge", "forward", "reject"] = "judge"
    status: int | None = None
    eof: bool = True
    """Half-close after an unfinished request (False: the proxy must time it out)."""


def request(
    target: bytes = CHAT,
    body: bytes = BODY,
    *,
    headers: bytes = b"",
    method: bytes = b"POST",
    version: bytes = b"HTTP/1.1",
    framing: bytes | None = None,
) -> bytes:
    """A request with a Content-Length body; ``framing`` replaces that header line."""
    if framing is None:
        framing = b"content-length: %d\r\n" % len(body)
    line = b"%s %s %s\r\n" % (method, target, version)
    return (
        line
        + b"host: proxy\r\ncontent-type: application/json\r\n"
        + headers
        + framing
        + b"\r\n"
        + body
    )


def chunked(body: bytes = BODY, *, size: bytes | None = None, ext: bytes = b"") -> bytes:
    """``body`` as one chunk and the last chunk; ``size`` replaces the chunk-size line."""
    line = size if size is not None else b"%x" % len(body)
    return line + ext + b"\r\n" + body + b"\r\n0\r\n\r\n"


def route_id(target: bytes) -> str:
    """A route case's id: ``/model/tiny/sleep`` -> ``route:model:tiny:sleep``."""
    return "route" + target.decode().replace("/", ":")


def _baseline() -> list[Case]:
    te = b"transfer-encoding: chunked\r\n"
    return [
        Case("plain", request(), "forward"),
        Case("model-prefix", request(b"/model/tiny" + CHAT), "forward"),
        Case("query", request(CHAT + b"?api-version=2024-06-01"), "forward"),
        Case("chunked", request(body=chunked(), framing=te), "forward"),
        Case("http10", request(version=b"HTTP/1.0"), "forward"),
        Case("pipelined-good", request() + request(b"/v1/completions"), "forward"),
        Case("completions", request(b"/v1/completions"), "forward"),
        # The reference backend serves chat and completions only: no other route reaches it.
        Case("embeddings", request(b"/model/tiny/v1/embeddings"), "reject", 404),
    ]


def _smuggling() -> list[Case]:
    te = b"transfer-encoding: chunked\r\n"
    # What follows the body under one framing: a second request h11 parses, or bytes it
    # rejects (then nothing of it may reach the engine).
    smuggled = request(b"/v1/completions")
    n = len(BODY)
    out = [
        # CL.TE / TE.CL: both framings; the engine must see one request, or none.
        Case("cl-te", request(body=chunked() + smuggled, framing=b"content-length: 4\r\n" + te)),
        Case("te-cl", request(body=chunked() + smuggled, framing=te + b"content-length: 4\r\n")),
        Case(
            "cl-te-zero",
            request(
                body=b"0\r\n\r\n" + smuggled,
                framing=b"content-length: %d\r\n" % (5 + len(smuggled)) + te,
            ),
        ),
        Case(
            "dup-cl-same", request(framing=b"content-length: %d\r\ncontent-length: %d\r\n" % (n, n))
        ),
        Case(
            "dup-cl-diff",
            request(framing=b"content-length: %d\r\ncontent-length: 4\r\n" % n),
            "reject",
        ),
        Case("cl-list", request(framing=b"content-length: %d, %d\r\n" % (n, n))),
        Case("cl-spaces", request(framing=b"content-length:   %d  \r\n" % n)),
        Case("cl-plus", request(framing=b"content-length: +%d\r\n" % n), "reject"),
        Case("cl-leading-zeros", request(framing=b"content-length: 000%d\r\n" % n)),
        Case("cl-inner-space", request(framing=b"content-length: 1 %d\r\n" % n), "reject"),
        Case("cl-negative", request(framing=b"content-length: -1\r\n"), "reject"),
        Case("cl-hex", request(framing=b"content-length: 0x%x\r\n" % n), "reject"),
        Case("cl-overflow", request(framing=b"content-length: 18446744073709551617\r\n"), "reject"),
    ]
    for name, header in [
        ("te-twice", te + b"transfer-encoding: identity\r\n"),
        ("te-space-before-colon", b"transfer-encoding : chunked\r\n"),
        ("te-list", b"transfer-encoding: chunked, identity\r\n"),
        ("te-xchunked", b"transfer-encoding: xchunked\r\n"),
        ("te-gzip", b"transfer-encoding: gzip\r\n"),
        ("te-gzip-chunked", b"transfer-encoding: gzip, chunked\r\n"),
        ("te-vtab", b"transfer-encoding:\x0bchunked\r\n"),
        ("te-name-nul", b"transfer-encoding\x00: chunked\r\n"),
        ("te-quoted", b'transfer-encoding: "chunked"\r\n'),
    ]:
        out.append(Case(name, request(body=chunked(), framing=header), "reject", 400))
    for name, header in [
        ("te-upper", b"transfer-encoding: CHUNKED\r\n"),
        ("te-tab", b"transfer-encoding:\tchunked\r\n"),
        ("te-obs-fold", b"transfer-encoding:\r\n chunked\r\n"),
        ("te-bare-lf", b"transfer-encoding: chunked\n"),
    ]:
        out.append(Case(name, request(body=chunked() + smuggled, framing=header)))
    return out


def _chunks() -> list[Case]:
    te = b"transfer-encoding: chunked\r\n"
    return [
        Case("chunk-ext", request(body=chunked(ext=b";name=value"), framing=te)),
        Case("chunk-ext-quoted", request(body=chunked(ext=b';a="b;c"'), framing=te)),
        Case("chunk-ext-long", request(body=chunked(ext=b";" + b"x" * 70_000), framing=te)),
        Case(
            "chunk-overflow",
            request(body=chunked(size=b"1000000000000003c"), framing=te),
            "reject",
            400,
        ),
        Case("chunk-garbage", request(body=chunked(size=b"3cz"), framing=te), "reject", 400),
        Case("chunk-negative", request(body=chunked(size=b"-3c"), framing=te), "reject", 400),
        Case("chunk-0x", request(body=chunked(size=b"0x3c"), framing=te), "reject", 400),
        Case(
            "chunk-bare-lf",
            request(body=b"%x\n%s\n0\n\n" % (len(BODY), BODY), framing=te),
            "reject",
            400,
        ),
        Case("chunk-size-too-small", request(body=chunked(size=b"4"), framing=te), "reject", 400),
        Case(
            "chunk-no-last",
            request(body=b"%x\r\n%s\r\n" % (len(BODY), BODY), framing=te),
            "reject",
            400,
        ),
        Case(
            "chunk-no-last-wait",
            request(body=b"%x\r\n%s\r\n" % (len(BODY), BODY), framing=te),
            "reject",
            408,
            eof=False,
        ),
        Case(
            "truncated-body",
            request(framing=b"content-length: %d\r\n" % (len(BODY) + 10)),
            "reject",
            400,
        ),
        Case(
            "truncated-body-wait",
            request(framing=b"content-length: %d\r\n" % (len(BODY) + 10)),
            "reject",
            408,
            eof=False,
        ),
        Case(
            "close-then-data", request(headers=b"connection: close\r\n") + request(body=SLOW_BODY)
        ),
        Case("http10-then-data", request(version=b"HTTP/1.0") + request(body=SLOW_BODY)),
    ]


def _targets() -> list[Case]:
    split = (
        b"/model/tiny/v1/models%20HTTP/1.1%0D%0AHost:%20x%0D%0A%0D%0APOST%20/v1/chat/completions"
    )
    out = [Case("split-request-line", request(split, SLOW_BODY), "reject", 400)]
    places = {
        "path": b"/v1/chat/completions{}",
        "model-segment": b"/model/tiny{}/v1/chat/completions",
        "tail": b"/model/tiny/v1/chat{}/completions",
        "query": b"/v1/chat/completions?x=1{}",
    }
    encoded = {"cr": b"%0D", "lf": b"%0a", "crlf": b"%0D%0A", "nul": b"%00", "space": b"%20"}
    encoded |= {"tab": b"%09", "del": b"%7f", "vt": b"%0B"}
    for place, template in places.items():
        for name, value in encoded.items():
            target = template.replace(b"{}", value)
            out.append(Case(f"pct-{name}-{place}", request(target), "reject", 400))
    raw = {"nul": b"\x00", "cr": b"\r", "lf": b"\n", "space": b" ", "tab": b"\t"}
    raw |= {"del": b"\x7f", "ctl": b"\x01", "obs-text": b"\xff"}
    for place, template in places.items():
        for name, value in raw.items():
            target = template.replace(b"{}", value)
            out.append(Case(f"raw-{name}-{place}", request(target), "reject"))
    return out


def _routes() -> list[Case]:
    traversal = [
        b"/model/tiny/../../admin",
        b"/model/tiny/v1/../../sleep",
        b"/model/tiny/%2e%2e/%2e%2e/sleep",
        b"/model/tiny/.%2e/sleep",
        b"/model/tiny/v1/chat/completions/..%2F..%2F..%2Fsleep",
        b"/model/tiny/v1%2F..%2F..%2Fsleep",
        b"/v1/../sleep",
        b"/v1/chat/completions/../../sleep",
        b"/v1/%2e%2e/sleep",
        b"/model/tiny//sleep",
    ]
    admin = [
        b"/model/tiny/sleep?level=2",
        b"/model/tiny/wake_up",
        b"/model/tiny/is_sleeping",
        b"/model/tiny/engine/info",
        b"/model/tiny/metrics",
        b"/model/tiny/health",
        b"/model/tiny/v1/models",
        b"/model/tiny/v1/load_lora_adapter",
        b"/v1/load_lora_adapter",
        b"/v1/unload_lora_adapter",
        b"/v1/chat/completions/extra",
    ]
    out = [Case(route_id(t), request(t), "reject", 404) for t in traversal + admin]
    out += [
        Case("pct-slash-tail", request(b"/model/tiny/v1%2Fchat%2Fcompletions")),
        Case("pct-encoded-route", request(b"/v1/chat/%63ompletions")),
        Case("absolute-form", request(b"http://engine" + CHAT)),
        Case("absolute-form-admin", request(b"http://engine/model/tiny/sleep"), "reject", 404),
        Case("asterisk-form", request(b"*", method=b"OPTIONS"), "reject"),
        Case("asterisk-post", request(b"*"), "reject"),
        Case("authority-form", request(b"engine:80", method=b"CONNECT"), "reject"),
    ]
    return out


def _lines() -> list[Case]:
    return [
        Case("http09", b"POST /v1/chat/completions\r\n\r\n"),
        Case("http09-get", b"GET /\r\n"),
        Case("version-lower", request(version=b"http/1.1")),
        Case("version-2", request(version=b"HTTP/2.0")),
        Case("version-extra", request(version=b"HTTP/1.1 x")),
        Case("double-space", request(b" /v1/chat/completions")),
        Case("bare-lf-head", request().replace(b"\r\n", b"\n", 3)),
        Case("no-host", request().replace(b"host: proxy\r\n", b""), "reject"),
        Case("method-lower", request(method=b"post"), "reject"),
        Case("method-get", request(method=b"GET"), "reject"),
        Case("method-put", request(method=b"PUT"), "reject"),
    ]


def _headers() -> list[Case]:
    out = [
        Case("obs-fold", request(headers=b"x-a: a\r\n b\r\n")),
        Case("obs-fold-cl", request(framing=b"content-length:\r\n %d\r\n" % len(BODY))),
        Case("obs-fold-host", request(headers=b"x-model-id: tiny\r\n\tsleep\r\n")),
    ]
    bad = {
        "nul-name": b"x-\x00a: 1\r\n",
        "nul-value": b"x-a: 1\x00\r\n",
        "cr-value": b"x-a: 1\r2\r\n",
        "cr-name": b"x-\ra: 1\r\n",
        "lf-name": b"x-\na: 1\r\n",
        "ctl-value": b"x-a: \x01\r\n",
        "del-value": b"x-a: \x7f\r\n",
        "space-name": b"x a: 1\r\n",
        "empty-name": b": 1\r\n",
        "no-colon": b"x-a\r\n",
        "auth-cr": b"authorization: Bearer a\rb\r\n",
    }
    out += [
        Case(f"header-{name}", request(headers=line), "reject", 400) for name, line in bad.items()
    ]
    out.append(Case("header-pct-crlf", request(headers=b"x-model-id: tiny%0D%0Ax: y\r\n")))
    # An upgrade the proxy takes would turn the engine connection into a raw tunnel.
    upgrade = b"connection: Upgrade, HTTP2-Settings\r\nupgrade: h2c\r\n"
    upgrade += b"http2-settings: AAMAAABkAAQAAP__\r\n"
    out.append(Case("upgrade-h2c", request(headers=upgrade) + request(b"/v1/completions")))
    websocket = b"connection: upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\n"
    out.append(Case("upgrade-websocket", request(headers=websocket) + request(b"/v1/completions")))
    return out


def _pipelines() -> list[Case]:
    good = request()
    split = b"/v1/models%20HTTP/1.1%0D%0AHost:%20x%0D%0A%0D%0APOST%20/v1/chat/completions"
    te = b"transfer-encoding: chunked\r\n"
    return [
        Case("pipe-then-split", good + request(b"/model/tiny" + split, SLOW_BODY)),
        Case("pipe-then-admin", good + request(b"/model/tiny/sleep?level=2")),
        Case(
            "pipe-then-cl-te",
            good + request(body=chunked() + good, framing=b"content-length: 4\r\n" + te),
        ),
        Case("pipe-then-garbage", good + b"\x00\x01\x02 garbage\r\n\r\n"),
        Case("pipe-then-nul-header", good + request(headers=b"x-a: \x00\r\n")),
    ]


def _bodies() -> list[Case]:
    return [
        Case("surrogate-model", request(body=b'{"model":"\\ud800"}'), "reject"),
        Case("surrogate-model-inner", request(body=b'{"model":"ti\\udc00ny"}'), "reject"),
        Case("surrogate-content", request(body=BODY.replace(b"hi", b"\\ud800"))),
        Case("invalid-utf8-model", request(body=b'{"model":"\xff"}'), "reject"),
        Case("model-crlf", request(body=b'{"model":"tiny\\r\\nx: y"}'), "reject"),
    ]


def corpus() -> list[Case]:
    """Every case, with unique ids."""
    cases = _baseline() + _smuggling() + _chunks() + _targets() + _routes()
    cases += _lines() + _headers() + _pipelines() + _bodies()
    ids = [case.id for case in cases]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    return cases
