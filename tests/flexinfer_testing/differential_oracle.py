"""The differential oracle: what a proxy may do with a client's bytes, judged against h11.

For every request h11 parses from the client's bytes, in order, the proxy either
(a) forwards exactly that request once, with the request-target h11 parsed (less a
``/model/<name>`` prefix) and the same body (its ``model`` field may be rewritten), and
relays the engine's answer; or (b) answers 4xx with an OpenAI-shaped JSON error and
forwards nothing. A request that must never reach an engine (a target with a control
character, space or NUL once percent-decoded; a header with a control character; a route
outside the inference API; another method than POST) must get (b). Bytes h11 rejects, an
unfinished request and bytes after a request that closes the connection are never
forwarded: the proxy answers 4xx or closes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote_to_bytes

from flexinfer_testing.http_reference import Answer, ParsedRequest, ParsedStream
from flexinfer_testing.recording_upstream import Recorded, answer_seq

INFERENCE_ROUTES = frozenset(
    {
        b"/v1/chat/completions",
        b"/v1/completions",
        b"/v1/embeddings",
        # Inference routes other backends document (OpenAI and vLLM): a proxy may forward
        # them; anything else (admin, sleep, LoRA loading, metrics, listings) it must not.
        b"/v1/responses",
        b"/v1/audio/transcriptions",
        b"/v1/audio/translations",
        b"/v1/audio/speech",
        b"/v1/images/generations",
        b"/v1/images/edits",
        b"/v1/images/variations",
        b"/v1/moderations",
        b"/v1/rerank",
        b"/v1/score",
    }
)
MODEL_PREFIX = b"/model/"
_UNSAFE = re.compile(rb"[\x00-\x20\x7f]")
_HEADER_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
"""Control characters but HTAB, which a field value may hold (RFC 9110 5.5)."""
_ABSOLUTE = re.compile(rb"^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*")
ERROR_KEYS = frozenset({"message", "type", "param", "code"})


def strip_model_prefix(target: bytes) -> bytes:
    """``/model/<name>/rest`` -> ``/rest`` (split on the raw bytes); others unchanged."""
    if not target.startswith(MODEL_PREFIX):
        return target
    _, slash, rest = target[len(MODEL_PREFIX) :].partition(b"/")
    return b"/" + rest if slash else target


def expected_targets(target: bytes) -> set[bytes]:
    """The request-targets a proxy may forward for the client's ``target``.

    The origin-form target h11 parsed, less a /model/<name> prefix; for an absolute-form
    target, also its origin-form part (RFC 9112 3.2.2: a server rebuilds the target); and
    either without an empty query's lone "?", which no engine reads differently.
    """
    out = {strip_model_prefix(target)}
    match = _ABSOLUTE.match(target)
    if match is not None:
        out.add(strip_model_prefix(target[match.end() :] or b"/"))
    return out | {t[:-1] for t in out if t.endswith(b"?")}


def route_of(target: bytes) -> bytes:
    """The percent-decoded path a request addresses, /model/<name> prefix stripped."""
    match = _ABSOLUTE.match(target)
    if match is not None:
        target = target[match.end() :]
    path = strip_model_prefix(target.partition(b"?")[0].partition(b"#")[0])
    return unquote_to_bytes(path)


def must_reject(request: ParsedRequest) -> str | None:
    """Why ``request`` must never reach an engine, or None."""
    if request.method != b"POST":
        return f"method {request.method!r} is not part of the inference API"
    if _UNSAFE.search(unquote_to_bytes(request.target)):
        return "the target has a control character, space or NUL once decoded"
    if any(_HEADER_CONTROL.search(name + value) for name, value in request.headers):
        return "a header has a control character"
    route = route_of(request.target)
    if route not in INFERENCE_ROUTES:
        return f"route {route!r} is not an inference route"
    return None


def same_body(sent: bytes, got: bytes) -> bool:
    """Whether ``got`` is ``sent``, but for the JSON ``model`` field."""
    if sent == got:
        return True
    try:
        before, after = json.loads(sent), json.loads(got)
    except ValueError:
        return False
    if not isinstance(before, dict) or not isinstance(after, dict):
        return False
    before.pop("model", None)
    after.pop("model", None)
    return bool(before == after)


def openai_error(answer: Answer) -> str | None:
    """Why ``answer``'s body is not ``{"error": {"message", "type", "param", "code"}}``."""
    try:
        data: Any = json.loads(answer.body)
    except ValueError:
        return f"a non-JSON error body {answer.body[:80]!r}"
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict) or set(error) != ERROR_KEYS:
        return f"an error body not in OpenAI's shape: {answer.body[:120]!r}"
    return None


@dataclass
class Observed:
    """What happened to one client connection's bytes."""

    parsed: ParsedStream
    answers: list[Answer]
    closed: bool
    """The proxy closed the connection before the client stopped reading."""
    hung: bool
    """The proxy neither answered nor closed in time."""
    garbage: str | None
    forwarded: list[Recorded]
    upstream_errors: list[str]
    claimed: set[int] = field(default_factory=set)


def violations(seen: Observed) -> list[str]:
    """Every way the proxy's behaviour breaks the rules above (empty: it kept them)."""
    out: list[str] = []
    requests = seen.parsed.requests
    for index, answer in enumerate(seen.answers):
        if index < len(requests):
            out += _judge(seen, requests[index], answer, f"request {index}")
        elif answer.status // 100 != 4:
            out.append(f"bytes after the requests got {answer.status}, not a 4xx")
    if len(seen.answers) > len(requests) + (seen.parsed.tail != "clean"):
        out.append(f"{len(seen.answers)} answers to {len(requests)} requests")
    out += _unanswered(seen)
    for recorded in seen.forwarded:
        if recorded.seq not in seen.claimed:
            out.append(f"forwarded with no answer relayed: {recorded.method!r} {recorded.target!r}")
    if seen.garbage is not None:
        out.append(f"the proxy wrote bytes that are no HTTP answer: {seen.garbage}")
    out += [f"the engine could not parse what the proxy sent: {e}" for e in seen.upstream_errors]
    return out


def _unanswered(seen: Observed) -> list[str]:
    requests, answers = seen.parsed.requests, seen.answers
    if seen.hung:
        return ["the proxy neither answered nor closed the connection"]
    if len(answers) >= len(requests):
        if seen.parsed.tail == "after_close" and not seen.closed:
            return ["the connection stayed open after a request that closes it"]
        return []
    if answers and answers[-1].status // 100 == 4 and seen.closed:
        return []  # it refused one and closed: the requests after it are not served
    index = len(answers)
    return [f"request {index} got no answer ({'closed' if seen.closed else 'timed out'})"]


def _judge(seen: Observed, request: ParsedRequest, answer: Answer, where: str) -> list[str]:
    if answer.status // 100 == 4:
        problem = openai_error(answer)
        return [f"{where}: {answer.status} with {problem}"] if problem else []
    if answer.status // 100 != 2:
        return [f"{where}: answered {answer.status} {answer.body[:120]!r}"]
    seq = answer_seq(answer.body)
    recorded = next((r for r in seen.forwarded if r.seq == seq), None)
    if recorded is None or seq in seen.claimed:
        return [f"{where}: got an answer that is not its own: {answer.body[:120]!r}"]
    seen.claimed.add(recorded.seq)
    out = []
    reason = must_reject(request)
    if reason is not None:
        out.append(f"{where} was forwarded as {recorded.target!r} but must be rejected: {reason}")
    if recorded.target not in expected_targets(request.target):
        out.append(f"{where}: target {request.target!r} was forwarded as {recorded.target!r}")
    if recorded.method != request.method:
        out.append(f"{where}: method {request.method!r} was forwarded as {recorded.method!r}")
    if not same_body(request.body, recorded.body):
        out.append(f"{where}: body {request.body[:80]!r} forwarded as {recorded.body[:80]!r}")
    return out
