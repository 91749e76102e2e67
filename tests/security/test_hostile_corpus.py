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
from flexinfer_testing.hostile_corpus import Case, corpus
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


UVICORN: frozenset[Server] = frozenset({"uvicorn"})
KNOWN: list[tuple[str, frozenset[Server], list[str]]] = [
    (
        "uvicorn's stock h11 protocol (FLEXINFER_PROXY_SERVER=uvicorn: the reference the "
        "proxy's tests also run on, not the default server) closes the connection without an "
        "answer on a bad chunk and on a body cut short; the proxy's own server answers 400",
        UVICORN,
        ["chunk-overflow", "chunk-bare-lf", "chunk-no-last", "truncated-body"],
    ),
]
"""(defect, servers, case ids) for the cases that fail: each is a strict xfail, so a fix
that lands shows as XPASS until its ids are taken out here. What is left is not the
proxy's code but uvicorn's: it is why the proxy serves with its own protocol."""


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
