"""The differential suite over hypothesis-generated requests, on both server protocols.

Each property draws requests from ``flexinfer_testing.hostile_strategies`` (one dimension
hostile at a time, then everything with pipelining) and judges what the proxy did with
``flexinfer_testing.differential_oracle``. Runs are derandomized, so a failure stays put;
set FLEXINFER_HYPOTHESIS_SHRINK=1 to shrink one to a minimal request.
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
from flexinfer_testing.proxy_servers import SERVERS, Server

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


async def _judge(proxy: ProxyUnderTest, data: bytes) -> None:
    run = await proxy.run(data)
    seen = run.observed
    event("forwarded" if seen.forwarded else "refused" if seen.answers else "closed")
    assert run.control.recorded is not None, run.describe()  # the engine is reachable
    assert not run.problems, run.describe()


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("proxy", SERVERS, indirect=True)
@_settings(100)
@given(data=requests(targets(), line=False, headers=False, framing=False, body=False))
async def test_generated_targets(proxy: ProxyUnderTest, data: bytes) -> None:
    await _judge(proxy, data)


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("proxy", SERVERS, indirect=True)
@_settings(100)
@given(data=requests(sound_targets(), headers=False, framing=False, body=False))
async def test_generated_request_lines(proxy: ProxyUnderTest, data: bytes) -> None:
    await _judge(proxy, data)


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("proxy", SERVERS, indirect=True)
@_settings(100)
@given(data=requests(sound_targets(), line=False, headers=False, framing=False))
async def test_generated_bodies(proxy: ProxyUnderTest, data: bytes) -> None:
    await _judge(proxy, data)


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("proxy", SERVERS, indirect=True)
@_settings(100)
@given(data=requests(sound_targets(), line=False, framing=False, body=False))
async def test_generated_headers(proxy: ProxyUnderTest, data: bytes) -> None:
    await _judge(proxy, data)


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("proxy", SERVERS, indirect=True)
@_settings(100)
@given(data=requests(sound_targets(), line=False, headers=False, body=False))
async def test_generated_framing(proxy: ProxyUnderTest, data: bytes) -> None:
    await _judge(proxy, data)


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("proxy", SERVERS, indirect=True)
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
