"""Hypothesis strategies for hostile HTTP/1.1 requests, built from their parts.

A request is a request line (method, target, version), a header list and a framed body,
each drawn mostly from sound values with hostile ones mixed in: percent-encoded and raw
control bytes, traversal, smuggled request lines, conflicting framing headers, bad chunk
sizes, bare LF line ends, obs-fold continuations. Mostly sound, so that most requests
reach the engine and the forwarding half of the oracle is exercised too.
"""

from __future__ import annotations

import json

from hypothesis import strategies as st

ROUTES = [
    b"/v1/chat/completions",
    b"/v1/completions",
    b"/v1/embeddings",
    b"/v1/models",
    b"/sleep",
    b"/wake_up",
    b"/v1/load_lora_adapter",
    b"/metrics",
    b"/",
]
PREFIXES = [b"", b"", b"/model/tiny", b"/model/ti%6Ey", b"/model/", b"http://engine", b"/model/x"]
FRAGMENTS = [
    b"%0d", b"%0A", b"%0D%0A", b"%00", b"%20", b"%09", b"%7f", b"%0b", b"%2e%2e/", b"../",
    b"%2F", b"%2f..%2f", b"//", b"\\", b"%", b"%zz", b"#", b"?", b";", b"%3F", b"%23", b"~",
    b"\x00", b"\r", b"\n", b" ", b"\t", b"\x7f", b"\x80", b"\xff",
    b"%20HTTP/1.1%0D%0AHost:%20x%0D%0A%0D%0APOST%20/v1/completions",
]  # fmt: skip
QUERY_PARTS = [b"a=1", b"api-version=2024-06-01", b"x=%0d%0a", b"x=%00", b"q=a%20b", b"&", b"="]
METHODS = [b"POST"] * 12 + [b"GET", b"PUT", b"post", b"OPTIONS", b"PO\x00ST", b"DELETE"]
VERSIONS = [b"HTTP/1.1"] * 12 + [b"HTTP/1.0", b"HTTP/2.0", b"http/1.1", b"HTTP/1.1 x", b""]
HEADER_NAMES = [
    b"x-a", b"x-model-id", b"transfer-encoding", b"content-length", b"connection", b"expect",
    b"upgrade", b"te", b"authorization", b"host", b"x-\x00a", b"x a", b"x-a ", b"", b"\rx",
    b"trailer", b"proxy-connection", b"x-forwarded-for",
]  # fmt: skip
VALUE_PARTS = [
    b"a", b"tiny", b"chunked", b"identity", b"gzip", b"close", b"keep-alive", b"100-continue",
    b"0", b"7", b" ", b"\t", b",", b"\x00", b"\r", b"\n", b"\r\n ", b"%0d%0a", b"\x7f", b"\xff",
    b"\x01", b"h2c",
]  # fmt: skip
MODELS = ["tiny"] * 6 + ["ti\ud800ny", "\udc00", "tiny\r\nx: y", "../tiny", "", "nope", "t" * 300]


def _splice(base: bytes, parts: list[tuple[int, bytes]]) -> bytes:
    for position, part in parts:
        at = position % (len(base) + 1)
        base = base[:at] + part + base[at:]
    return base


@st.composite
def targets(draw: st.DrawFn) -> bytes:
    """A request-target: a prefix, a route, hostile fragments spliced in, a query."""
    target = draw(st.sampled_from(PREFIXES)) + draw(st.sampled_from(ROUTES))
    fragments = st.tuples(st.integers(0, 64), st.sampled_from(FRAGMENTS))
    target = _splice(target, draw(st.lists(fragments, max_size=2)))
    if draw(st.integers(0, 3)) == 0:
        target += b"?" + b"&".join(draw(st.lists(st.sampled_from(QUERY_PARTS), max_size=3)))
    return target


def sound_targets() -> st.SearchStrategy[bytes]:
    """Targets a proxy must forward."""
    return st.sampled_from([b"/v1/chat/completions", b"/model/tiny/v1/completions"])


@st.composite
def request_lines(
    draw: st.DrawFn, target: st.SearchStrategy[bytes], *, hostile: bool = True
) -> bytes:
    """``METHOD SP target SP version`` (the separators sometimes doubled or a tab)."""
    if not hostile:
        return b"POST " + draw(target) + b" HTTP/1.1"
    method = draw(st.sampled_from(METHODS))
    sep = draw(st.sampled_from([b" "] * 10 + [b"  ", b"\t"]))
    version = draw(st.sampled_from(VERSIONS))
    return method + sep + draw(target) + (sep + version if version else b"")


@st.composite
def extra_headers(draw: st.DrawFn) -> list[bytes]:
    """Header lines (without line ends) from hostile names and values; some folded."""
    value = st.lists(st.sampled_from(VALUE_PARTS), max_size=4).map(b"".join)
    lines = []
    for name, val in draw(st.lists(st.tuples(st.sampled_from(HEADER_NAMES), value), max_size=3)):
        colon = draw(st.sampled_from([b": ", b": ", b":", b" : ", b":\r\n "]))
        lines.append(name + colon + val)
    return lines


SOUND_BODY = b'{"model":"tiny","messages":[{"role":"user","content":"hi"}]}'


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    """A chat request body: mostly sound JSON, sometimes with a hostile model or bytes."""
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(st.binary(max_size=40))
    body: dict[str, object] = {"model": draw(st.sampled_from(MODELS))}
    body["messages"] = [{"role": "user", "content": draw(st.sampled_from(["hi", "\ud800", ""]))}]
    if draw(st.booleans()):
        body["stream"] = draw(st.booleans())
    encoded = json.dumps(body, ensure_ascii=draw(st.booleans()))
    return encoded.encode("utf-8", "surrogatepass")


@st.composite
def framed(draw: st.DrawFn, body: bytes) -> tuple[list[bytes], bytes]:
    """Framing header lines and the body as sent: Content-Length, chunked, or broken."""
    kind = draw(st.sampled_from(["length"] * 6 + ["chunked"] * 3 + ["both", "off", "none"]))
    length = [b"content-length: %d" % len(body)]
    if kind == "length":
        return length, body
    if kind == "off":
        return [b"content-length: %d" % max(0, len(body) + draw(st.integers(-3, 3)))], body
    if kind == "none":
        return [], body
    chunked = draw(chunk_encodings(body))
    te = [b"transfer-encoding: chunked"]
    return (length + te if kind == "both" else te), chunked


@st.composite
def chunk_encodings(draw: st.DrawFn, body: bytes) -> bytes:
    """``body`` in chunks; sometimes with extensions, a bad size or no last chunk."""
    cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=3)))
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    out = b""
    for piece in (p for p in pieces if p):
        size = b"%x" % len(piece)
        size = draw(st.sampled_from([size] * 8 + [size + b";ext=1", size.upper(), b"z", b"-1"]))
        out += size + b"\r\n" + piece + b"\r\n"
    return out + draw(st.sampled_from([b"0\r\n\r\n"] * 8 + [b"", b"0\r\n", b"0\r\nx: y\r\n\r\n"]))


@st.composite
def requests(
    draw: st.DrawFn,
    target: st.SearchStrategy[bytes] | None = None,
    *,
    line: bool = True,
    headers: bool = True,
    framing: bool = True,
    body: bool = True,
) -> bytes:
    """One whole request as bytes; each flag makes that part hostile (else sound)."""
    first = draw(request_lines(target if target is not None else targets(), hostile=line))
    content = draw(bodies()) if body else SOUND_BODY
    if framing:
        framing_lines, sent = draw(framed(content))
    else:
        framing_lines, sent = [b"content-length: %d" % len(content)], content
    head = [b"host: proxy", b"content-type: application/json"]
    if headers:
        head = [h for h in head if draw(st.integers(0, 9))] + draw(extra_headers())
    lines = [first, *draw(st.permutations(head + framing_lines))]
    hostile = line or headers or framing
    ends = [draw(st.sampled_from([b"\r\n"] * 12 + [b"\n"])) if hostile else b"\r\n" for _ in lines]
    return b"".join(a + b for a, b in zip(lines, ends, strict=True)) + b"\r\n" + sent


def sound_requests() -> st.SearchStrategy[bytes]:
    """Requests a proxy must forward (to an inference route, in sound framing)."""
    return requests(sound_targets(), line=False, headers=False, framing=False, body=False)


@st.composite
def pipelines(draw: st.DrawFn) -> bytes:
    """One request, or a sound one and then a hostile one in the same write."""
    if draw(st.integers(0, 3)):
        return draw(requests())
    return draw(sound_requests()) + draw(requests())
