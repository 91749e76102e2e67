"""1,000 concurrent requests to a cold model, half of them streaming, on both protocols.

The model has no endpoint at first and the proxy's queue bound (max_queue_size) stays at
its default of 100. Once the queue is full and the requests over the bound were answered,
an endpoint becomes ready. Every request must then have completed (a whole answer; a
stream ending with ``data: [DONE]``) or been refused with 503 and Retry-After: no 500, no
reset, no hang, no 200 followed by an SSE error event.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from flexinfer_proxy.settings import ProxySettings
from flexinfer_proxy.testing import make_model
from flexinfer_proxy.testing_stack import ProxyStack, upstreams, wait_until
from flexinfer_testing.burst_clients import GOOD, httpx_chat, sdk_chat
from flexinfer_testing.proxy_servers import SERVERS, Server, served_proxy

KEY = "default/tiny"
REQUESTS = 1000
SDK_SAMPLE = 40
"""Requests of the burst made through the openai SDK (half of them streaming)."""
SDK_QUEUED = 10
"""Of those, the ones sent first, which are in the queue before the rest of the burst."""
BOUND = ProxySettings.model_fields["max_queue_size"].default
CLIENT_TIMEOUT_S = 45.0
"""A request still unanswered after this long counts as a hang (the queue waits 60 s)."""


async def _burst(stack: ProxyStack) -> Counter[tuple[str, str]]:
    """Fire the burst; once the queue is full, make the engine ready; count outcomes.

    In three waves, so that the openai SDK sample (slower off the mark than httpx) has
    requests both in the queue and over the bound: SDK requests until they queue, then
    the httpx requests, then, once the queue is full, the rest of the SDK sample.
    """
    limits = httpx.Limits(max_connections=REQUESTS, max_keepalive_connections=0)
    timeout = httpx.Timeout(CLIENT_TIMEOUT_S, connect=CLIENT_TIMEOUT_S)
    async with (
        upstreams(1) as ups,
        httpx.AsyncClient(limits=limits, timeout=timeout) as http,
        stack.openai(timeout=CLIENT_TIMEOUT_S) as sdk,
    ):
        kinds: list[str] = []
        tasks: list[asyncio.Task[str]] = []

        def start(client: str, stream: bool) -> None:
            kinds.append(f"{client}/{'stream' if stream else 'json'}")
            if client == "sdk":
                tasks.append(asyncio.create_task(sdk_chat(sdk, stream=stream)))
            else:
                tasks.append(asyncio.create_task(httpx_chat(http, stack.url, stream=stream)))

        for index in range(SDK_QUEUED):
            start("sdk", index % 2 == 0)
        await wait_until(lambda: stack.core.queue.depth(KEY) >= SDK_QUEUED, timeout_s=30)
        for index in range(REQUESTS - SDK_SAMPLE):
            start("httpx", index % 2 == 0)
        await wait_until(lambda: stack.core.queue.depth(KEY) >= BOUND, timeout_s=30)
        for index in range(SDK_SAMPLE - SDK_QUEUED):
            start("sdk", index % 2 == 0)
        # Every request over the bound is answered before the engine is ready; one that
        # hangs is counted as such at the end (and the queue still served).
        settled = REQUESTS - BOUND
        with contextlib.suppress(AssertionError):
            await wait_until(lambda: sum(t.done() for t in tasks) >= settled, timeout_s=30)
        await stack.set_endpoints(KEY, [ups[0][1]])
        outcomes = await asyncio.gather(*tasks)
        assert len(ups[0][0].seen) >= BOUND  # the queued requests reached the engine
    return Counter(zip(kinds, outcomes, strict=True))


@pytest.mark.parametrize(
    "server",
    SERVERS,
)
async def test_cold_burst_completes_or_gets_503(tmp_path: Path, server: Server) -> None:
    started = time.monotonic()
    async with served_proxy(tmp_path, [make_model("tiny")], server) as stack:
        counts = await _burst(stack)
    took = time.monotonic() - started
    print(f"\n{server}: {REQUESTS} requests in {took:.1f}s")
    for (kind, outcome), count in sorted(counts.items()):
        print(f"  {kind:14s} {outcome:16s} {count:5d}")
    total: Counter[str] = Counter()
    for (_, outcome), count in counts.items():
        total[outcome] += count
    assert sum(total.values()) == REQUESTS
    assert set(total) <= GOOD, dict(total)
    assert total["200"] + total["200-stream"] == BOUND, dict(total)  # the queue was served
    assert total["503"] == REQUESTS - BOUND, dict(total)  # and the bound was kept
