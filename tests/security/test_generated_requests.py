"""The differential suite over hypothesis-generated requests, on both server protocols.

Each property draws requests from ``flexinfer_testing.hostile_strategies`` (one dimension
hostile at a time, then everything with pipelining) and judges what the proxy did with
``flexinfer_testing.differential_oracle``. Runs are derandomized, so a strict xfail stays
put; set FLEXINFER_HYPOTHESIS_SHRINK=1 to shrink a failure to a minimal request.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from hypothesis import HealthCheck, Phase, event, given, settings

from flexinfer_testing.differential import ProxyUnderTest, proxy_under_test
from flexinfer_testing.differential_oracle import must_reject
from flexinfer_testing.hostile_strategies import (
    pipelines,
    requests,
    sound_requests,
    sound_targets,
    targets,
)
from flexinfer_testing.http_reference import parse_requests
from flexinfer_testing.proxy_servers import Server

_PHASES = [Phase.explicit, Phase.generate]
if os.environ.get("FLEXINFER_HYPOTHESIS_SHRINK") == "1":
    _PHASES.append(Phase.shrink)


def _settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        phases=_PHASES,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def proxy(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[ProxyUnderTest]:
    """One proxy per server protocol for the module; every example gets a fresh engine."""
    server: Server = request.param
    async with proxy_under_test(tmp_path_factory.mktemp(server), server) as under_test:
        yield under_test


def _servers(flexinfer: str | None, uvicorn: str | None) -> list[object]:
    """Both servers, each a strict xfail with its defect when one is given."""
    out: list[object] = []
    for server, defect in (("flexinfer", flexinfer), ("uvicorn", uvicorn)):
        marks = [pytest.mark.xfail(strict=True, reason=defect)] if defect else []
        out.append(pytest.param(server, marks=marks, id=server))
    return out


async def _judge(proxy: ProxyUnderTest, data: bytes) -> None:
    run = await proxy.run(data)
    seen = run.observed
    event("forwarded" if seen.forwarded else "refused" if seen.answers else "closed")
    assert run.control.recorded is not None, run.describe()  # the engine is reachable
    assert not run.problems, run.describe()


TARGETS = (
    "issue 9: percent-encoded CR/LF/NUL/space in the target are decoded and written raw "
    "upstream (request splitting), or forwarded; routes outside the inference API are "
    "forwarded; a POST outside /v1/ and /model/ gets FastAPI's {'detail': ...} 404, not "
    "OpenAI's error shape"
)
NOT_OPENAI_405 = (
    "another method than POST gets FastAPI's {'detail': ...} 405, not OpenAI's error shape"
)
UVICORN_400 = (
    "uvicorn's protocol answers what its parser refuses with a plain-text 400, not OpenAI's "
    "error shape, and the request before such bytes gets no answer"
)
SURROGATE = "issue 9: a lone surrogate in the model name (escaped or UTF-8-encoded) gives a 500"
CLOSE = "issue 9: a request followed by bytes the parser refuses is closed without its answer"
EVERYTHING = "all of the defects above: " + "; ".join([TARGETS, SURROGATE, CLOSE])


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("proxy", _servers(TARGETS, TARGETS), indirect=True)
@_settings(100)
@given(data=requests(targets(), line=False, headers=False, framing=False, body=False))
async def test_generated_targets(proxy: ProxyUnderTest, data: bytes) -> None:
    await _judge(proxy, data)


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("proxy", _servers(NOT_OPENAI_405, UVICORN_400), indirect=True)
@_settings(100)
@given(data=requests(sound_targets(), headers=False, framing=False, body=False))
async def test_generated_request_lines(proxy: ProxyUnderTest, data: bytes) -> None:
    await _judge(proxy, data)


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("proxy", _servers(SURROGATE, SURROGATE), indirect=True)
@_settings(100)
@given(data=requests(sound_targets(), line=False, headers=False, framing=False))
async def test_generated_bodies(proxy: ProxyUnderTest, data: bytes) -> None:
    await _judge(proxy, data)


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("proxy", _servers(None, UVICORN_400), indirect=True)
@_settings(100)
@given(data=requests(sound_targets(), line=False, framing=False, body=False))
async def test_generated_headers(proxy: ProxyUnderTest, data: bytes) -> None:
    await _judge(proxy, data)


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("proxy", _servers(CLOSE, UVICORN_400), indirect=True)
@_settings(100)
@given(data=requests(sound_targets(), line=False, headers=False, body=False))
async def test_generated_framing(proxy: ProxyUnderTest, data: bytes) -> None:
    await _judge(proxy, data)


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("proxy", _servers(EVERYTHING, EVERYTHING), indirect=True)
@_settings(200)
@given(data=pipelines())
async def test_generated_pipelines(proxy: ProxyUnderTest, data: bytes) -> None:
    await _judge(proxy, data)


@settings(max_examples=50, deadline=None, derandomize=True, database=None)
@given(data=sound_requests())
def test_sound_requests_are_forwardable(data: bytes) -> None:
    """Not vacuous: the sound half of the strategies gives requests a proxy must forward."""
    parsed = parse_requests(data)
    assert len(parsed.requests) == 1, parsed
    assert parsed.tail == "clean"
    assert must_reject(parsed.requests[0]) is None
