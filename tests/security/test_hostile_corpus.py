"""The differential suite over a fixed corpus of hostile requests, on both server protocols.

Each case is raw bytes written to the proxy; the recording engine behind it shows what was
forwarded. See ``flexinfer_testing.differential_oracle`` for the rules, and
``flexinfer_testing.hostile_corpus`` for the cases.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from flexinfer_testing.differential import CaseRun, ProxyUnderTest, proxy_under_test
from flexinfer_testing.hostile_corpus import Case, corpus, route_id
from flexinfer_testing.proxy_servers import SERVERS, Server


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=SERVERS)
async def proxy(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[ProxyUnderTest]:
    """One proxy per server protocol for the whole module (cases run one at a time)."""
    server: Server = request.param
    async with proxy_under_test(tmp_path_factory.mktemp(server), server) as under_test:
        yield under_test


def expectation_problems(case: Case, run: CaseRun) -> list[str]:
    """What the case's own expectation adds to the general rules."""
    seen = run.observed
    if case.expect == "forward":
        statuses = [a.status for a in seen.answers]
        if statuses != [200] * len(seen.parsed.requests) or not seen.forwarded:
            return [f"a sound request was not forwarded and answered: {statuses}"]
        control = run.control.recorded
        if control is None or control.conn not in {r.conn for r in seen.forwarded}:
            # Else "the next client on that pooled connection" would be tested nowhere.
            return ["the control request did not reuse the case's pooled engine connection"]
    if case.expect == "reject":
        if not seen.answers or seen.answers[0].status // 100 != 4:
            return ["no 4xx answer (a silent close, or an answer that is no refusal)"]
        if case.status is not None and seen.answers[0].status != case.status:
            return [f"answered {seen.answers[0].status}, not {case.status}"]
        if seen.forwarded:
            return ["a request that must be refused reached the engine"]
    return []


BOTH = frozenset(SERVERS)
FLEXINFER: frozenset[Server] = frozenset({"flexinfer"})
UVICORN: frozenset[Server] = frozenset({"uvicorn"})
_PCT = [
    f"pct-{c}-{p}"
    for c in ("cr", "lf", "crlf", "nul", "space", "tab", "del", "vt")
    for p in ("path", "query")
]
_PCT_TAIL = [f"pct-{c}-tail" for c in ("cr", "lf", "crlf", "nul", "space", "tab", "del", "vt")]
_ROUTES = [
    "/model/tiny/../../admin",
    "/model/tiny/v1/../../sleep",
    "/model/tiny/%2e%2e/%2e%2e/sleep",
    "/model/tiny/.%2e/sleep",
    "/model/tiny/v1/chat/completions/..%2F..%2F..%2Fsleep",
    "/model/tiny/v1%2F..%2F..%2Fsleep",
    "/v1/../sleep",
    "/v1/chat/completions/../../sleep",
    "/v1/%2e%2e/sleep",
    "/model/tiny//sleep",
    "/model/tiny/sleep?level=2",
    "/model/tiny/wake_up",
    "/model/tiny/is_sleeping",
    "/model/tiny/engine/info",
    "/model/tiny/metrics",
    "/model/tiny/health",
    "/model/tiny/v1/models",
    "/model/tiny/v1/load_lora_adapter",
    "/v1/load_lora_adapter",
    "/v1/unload_lora_adapter",
    "/v1/chat/completions/extra",
]
KNOWN: list[tuple[str, frozenset[Server], list[str]]] = [
    (
        "issue 9 (critical): the /model/<name>/ tail is taken from the percent-decoded path and "
        "written raw into the engine's request line: a second request is smuggled, and the next "
        "client on that pooled connection gets the attacker's answer",
        BOTH,
        ["split-request-line", "pipe-then-split", "pct-slash-tail", *_PCT_TAIL],
    ),
    (
        "issue 9: a target with a percent-encoded control character, space or NUL is forwarded "
        "(or refused with another status) instead of refused with 400",
        BOTH,
        [*_PCT, "pct-space-model-segment"],
    ),
    (
        "issue 9: every path under /v1/ and /model/<name>/ is forwarded, admin routes and "
        "traversal included, instead of an OpenAI-shaped 404 outside the inference routes",
        BOTH,
        [*(route_id(r.encode()) for r in _ROUTES), "absolute-form-admin", "pipe-then-admin"],
    ),
    (
        "issue 9: framing errors (bad chunk sizes, an unsupported Transfer-Encoding, a body cut "
        "short, a malformed request line, no Host) end in a silent close instead of a 400",
        BOTH,
        ["chunk-no-last", "truncated-body", "raw-space-path", "raw-space-query", "no-host"],
    ),
    (
        "issue 9: framing errors (bad chunk sizes, an unsupported Transfer-Encoding) end in a "
        "silent close instead of a 400",
        FLEXINFER,
        [
            "te-xchunked",
            "te-gzip",
            "te-quoted",
            "te-gzip-chunked",
            "chunk-overflow",
            "chunk-garbage",
            "chunk-negative",
            "chunk-0x",
            "chunk-bare-lf",
            "chunk-size-too-small",
        ],
    ),
    (
        "uvicorn refuses a message with several framing headers (Content-Length and "
        "Transfer-Encoding) but answers nothing, instead of a 400",
        UVICORN,
        ["te-gzip-chunked"],
    ),
    (
        "issue 9: a request followed by more bytes (after Connection: close or HTTP/1.0, or "
        "bytes the parser refuses) is closed without its answer, after it may have run upstream",
        FLEXINFER,
        [
            "close-then-data",
            "http10-then-data",
            "pipe-then-cl-te",
            "pipe-then-garbage",
            "pipe-then-nul-header",
        ],
    ),
    (
        "uvicorn's protocol answers what its parser refuses with a plain-text 400 "
        "('Invalid HTTP request received.'), not OpenAI's error shape, and a pipelined request "
        "before such bytes gets no answer of its own",
        UVICORN,
        [
            "cl-te",
            "te-cl",
            "cl-te-zero",
            "dup-cl-same",
            "cl-list",
            "te-obs-fold",
            "te-bare-lf",
            "bare-lf-head",
            "authority-form",
            "method-lower",
            "obs-fold",
            "obs-fold-cl",
            "obs-fold-host",
            "header-ctl-value",
            "header-del-value",
            "pipe-then-cl-te",
            "pipe-then-garbage",
            "pipe-then-nul-header",
        ],
    ),
    (
        "issue 9: a lone surrogate in the model name gives a 500 (and a traceback per request)",
        BOTH,
        ["surrogate-model", "surrogate-model-inner"],
    ),
    (
        "what the proxied POST routes do not take (another method, an asterisk-form target) "
        "gets FastAPI's {'detail': ...} 404/405, not OpenAI's error shape",
        BOTH,
        ["asterisk-form", "asterisk-post", "method-get", "method-put"],
    ),
]
"""(defect, servers, case ids) for the cases that fail today: each is a strict xfail, so a
fix that lands shows as XPASS until its ids are taken out here."""


def known_defect(server: Server, case_id: str) -> str | None:
    """The defect that makes ``case_id`` fail on ``server`` today, if any."""
    reasons = [r for r, servers, ids in KNOWN if server in servers and case_id in ids]
    return "; ".join(reasons) or None


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("case", corpus(), ids=lambda case: case.id)
async def test_hostile_request(
    proxy: ProxyUnderTest, case: Case, request: pytest.FixtureRequest
) -> None:
    defect = known_defect(proxy.server, case.id)
    if defect is not None:
        request.applymarker(pytest.mark.xfail(strict=True, reason=defect))
    run = await proxy.run(case.data, eof=case.eof)
    # Not vacuous: the engine is reachable, and received the control client's request.
    assert run.control.recorded is not None, run.describe()
    problems = run.problems + expectation_problems(case, run)
    assert not problems, run.describe()


def test_known_defects_name_real_cases() -> None:
    ids = {case.id for case in corpus()}
    for _, _, names in KNOWN:
        assert set(names) <= ids, set(names) - ids
