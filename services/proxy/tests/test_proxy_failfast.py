"""Failures are answered at once, with the reason, instead of after the wait budget.

Every model here has the default budget (60 s, or more): a test that waited for it would
hit its own ``wait_for`` bound first. What the client must see: an HTTP error status with
an OpenAI-shaped body naming the reason, never 200 followed by an error event, unless a
progress stream had already started.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

import httpx

from flexinfer_common.api import ModelPhase
from flexinfer_common.bus import topics
from flexinfer_common.bus.topics import EndpointInfo, EndpointsEvent, ProgressEvent
from flexinfer_proxy.testing import make_model
from flexinfer_proxy.testing_stack import ProxyStack, proxy_stack, upstreams, wait_until

KEY = "default/tiny"
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
REASON = "unknown backend 'nope'; known backends: reference, vllm"
BOUND_S = 20.0
"""Far below every budget here: an answer within it did not wait the budget out."""


async def publish_state(
    stack: ProxyStack, phase: str, blocked: str | None, urls: tuple[str, ...] = ()
) -> None:
    """An endpoints event as the controller sends it, applied before returning."""
    stack.revision += 1
    event = EndpointsEvent(
        model=KEY,
        endpoints=[EndpointInfo(url=u, replica=f"r{i}") for i, u in enumerate(urls)],
        phase=phase,
        revision=stack.revision,
        blocked=blocked,
    )
    await stack.bus.publish(topics.ENDPOINTS, event.model_dump(mode="json"))
    await wait_until(lambda: stack.core.table.revision(KEY) == stack.revision)


async def chat(client: httpx.AsyncClient, stack: ProxyStack, **extra: object) -> httpx.Response:
    """One chat completion through the proxy, bounded."""
    body = {**CHAT, **extra}
    request = client.post(f"{stack.url}/v1/chat/completions", json=body)
    return await asyncio.wait_for(request, BOUND_S)


def assert_unavailable(reply: httpx.Response) -> None:
    """503 model_unavailable carrying the controller's reason, with a Retry-After."""
    assert reply.status_code == 503
    assert int(reply.headers["retry-after"]) >= 1
    error = reply.json()["error"]
    assert error["code"] == "model_unavailable"
    assert REASON in error["message"]


async def test_a_failed_model_is_answered_at_once_with_the_reason(tmp_path: Path) -> None:
    async with (
        proxy_stack(tmp_path, [make_model("tiny")]) as stack,
        httpx.AsyncClient(timeout=30) as client,
    ):
        await publish_state(stack, "Failed", REASON)
        assert_unavailable(await chat(client, stack))
        streamed = await chat(client, stack, stream=True)
        assert_unavailable(streamed)  # an error status, not 200 and an error event
        assert stack.core.queue.depth(KEY) == 0


async def test_waiting_requests_are_answered_when_the_model_fails(tmp_path: Path) -> None:
    async with (
        proxy_stack(tmp_path, [make_model("tiny")], progress_sse=False) as stack,
        httpx.AsyncClient(timeout=30) as client,
    ):
        waiting = [asyncio.create_task(chat(client, stack, user=str(i))) for i in range(5)]
        await wait_until(lambda: stack.core.queue.depth(KEY) == 5)
        await publish_state(stack, "Failed", REASON)
        for reply in await asyncio.gather(*waiting):
            assert_unavailable(reply)


async def test_a_progress_stream_ends_with_the_reason(tmp_path: Path) -> None:
    async with (
        proxy_stack(tmp_path, [make_model("tiny")]) as stack,
        httpx.AsyncClient(timeout=30) as client,
    ):
        body = {**CHAT, "stream": True}
        async with client.stream("POST", f"{stack.url}/v1/chat/completions", json=body) as reply:
            assert reply.status_code == 200  # it waits: the progress stream began
            lines = reply.aiter_lines()
            assert (await anext(lines)).startswith(": flexinfer cold-start phase=queued")
            await publish_state(stack, "Failed", REASON)
            rest = [line async for line in lines if line.startswith("data: ")]
        assert REASON in json.loads(rest[-1].removeprefix("data: "))["error"]["message"]


async def test_a_failure_read_from_the_store_is_answered_at_once(tmp_path: Path) -> None:
    model = make_model("tiny")
    model.status.phase = ModelPhase.FAILED
    model.status.message = REASON
    async with (
        proxy_stack(tmp_path, [model]) as stack,
        httpx.AsyncClient(timeout=30) as client,
    ):
        assert_unavailable(await chat(client, stack))


async def test_a_model_that_recovers_is_served_again(tmp_path: Path) -> None:
    async with (
        upstreams(1) as [(_, url)],
        proxy_stack(tmp_path, [make_model("tiny")]) as stack,
        httpx.AsyncClient(timeout=30) as client,
    ):
        await publish_state(stack, "Failed", REASON)
        assert_unavailable(await chat(client, stack))
        await publish_state(stack, "Loading", None)
        waiting = asyncio.create_task(chat(client, stack))
        await wait_until(lambda: stack.core.queue.depth(KEY) == 1)
        await publish_state(stack, "Ready", None, (url,))
        assert (await waiting).status_code == 200


async def test_a_dead_external_endpoint_is_a_502_within_the_connect_timeout(
    tmp_path: Path,
) -> None:
    async with upstreams(1) as [(fake, url)]:
        pass  # stopped: its port refuses connections now
    model = make_model("tiny")
    model.spec.endpoints = [url]
    async with (
        proxy_stack(tmp_path, [model], health_interval_s=3600) as stack,
        httpx.AsyncClient(timeout=30) as client,
    ):
        for _ in range(3):  # the first connect fails; the next find it cooling down
            reply = await chat(client, stack)
            assert reply.status_code == 502
            assert reply.json()["error"]["code"] == "upstream_error"
        assert stack.core.queue.depth(KEY) == 0
        assert not fake.seen


async def test_an_explicit_cold_start_timeout_is_honoured_as_given(tmp_path: Path) -> None:
    async with (
        proxy_stack(tmp_path, [make_model("tiny", cold_start_timeout_s=0.3)]) as stack,
        httpx.AsyncClient(timeout=30) as client,
    ):
        assert stack.core.settings.queue_timeout == 60  # the proxy's own budget is longer
        reply = await chat(client, stack)
        assert reply.status_code == 503
        assert reply.json()["error"]["code"] == "activation_timeout"


async def test_streaming_requests_over_the_queue_bound_get_503(tmp_path: Path) -> None:
    async with (
        upstreams(1) as [(_, url)],
        proxy_stack(tmp_path, [make_model("tiny")], max_queue_size=3) as stack,
        httpx.AsyncClient(timeout=30) as client,
    ):
        body = {**CHAT, "stream": True}
        streams = [
            await client.send(
                client.build_request("POST", f"{stack.url}/v1/chat/completions", json=body),
                stream=True,
            )
            for _ in range(3)
        ]
        await wait_until(lambda: stack.core.queue.depth(KEY) == 3)
        over = await asyncio.gather(*(chat(client, stack, stream=True) for _ in range(5)))
        for reply in over:
            assert reply.status_code == 503
            assert reply.json()["error"]["code"] == "queue_full"
            assert int(reply.headers["retry-after"]) >= 1
        await publish_state(stack, "Ready", None, (url,))
        for stream in streams:
            assert stream.status_code == 200
            text = (await stream.aread()).decode()
            await stream.aclose()
            assert text.rstrip().endswith("data: [DONE]")


async def test_the_first_progress_line_of_a_new_cold_start_is_not_ready(tmp_path: Path) -> None:
    async with (
        proxy_stack(tmp_path, [make_model("tiny")]) as stack,
        httpx.AsyncClient(timeout=30) as client,
    ):
        # What the previous cold start ended with, still on the board.
        old = ProgressEvent(model=KEY, phase="ready", at=datetime.now(UTC), eta_s=0)
        stack.core.progress.update(old)
        body = {**CHAT, "stream": True}
        async with client.stream("POST", f"{stack.url}/v1/chat/completions", json=body) as reply:
            first = await asyncio.wait_for(anext(reply.aiter_lines()), BOUND_S)
        assert first.startswith(": flexinfer cold-start phase=queued")
        assert "eta=0s" not in first
