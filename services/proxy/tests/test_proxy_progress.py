"""Cold-start progress: SSE comment lines for waiting streams; opt-in for non-streaming."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import httpx

from flexinfer_common.bus import topics
from flexinfer_common.bus.topics import ProgressEvent
from flexinfer_proxy.testing import make_model
from flexinfer_proxy.testing_stack import ProxyStack, proxy_stack, upstreams, wait_until

KEY = "default/tiny"


async def _phase(stack: ProxyStack, phase: str, eta: float | None = None) -> None:
    event = ProgressEvent(model=KEY, phase=phase, at=datetime.now(UTC), eta_s=eta)  # type: ignore[arg-type]
    await stack.bus.publish(topics.PROGRESS, event.model_dump(mode="json"))


async def test_streaming_request_gets_progress_then_the_stream(tmp_path: Path) -> None:
    async with (
        upstreams(1) as ups,
        proxy_stack(tmp_path, [make_model("tiny")], progress_interval_s=5) as stack,
    ):
        async with stack.openai() as client:

            async def engine_starts() -> None:
                await wait_until(lambda: stack.core.queue.depth(KEY) == 1)
                await _phase(stack, "scheduled")
                await _phase(stack, "loading-weights", 4)
                await wait_until(
                    lambda: (
                        (p := stack.core.progress.latest(KEY)) is not None
                        and p.phase == "loading-weights"
                    )
                )
                await asyncio.sleep(0.1)
                await stack.set_endpoints(KEY, [ups[0][1]])

            starting = asyncio.create_task(engine_starts())
            async with client.chat.completions.with_streaming_response.create(
                model="tiny", messages=[{"role": "user", "content": "hi"}], stream=True
            ) as response:
                raw = b"".join([chunk async for chunk in response.iter_bytes()])
            await starting
        text = raw.decode()
        assert text.startswith(": flexinfer cold-start phase=queued")
        assert ": flexinfer cold-start phase=loading-weights eta=4s" in text
        assert ": flexinfer cold-start phase=ready" in text
        assert text.rstrip().endswith("data: [DONE]")
        # The openai SDK parses the same stream, ignoring the comments.
        async with stack.openai() as client:
            stream = await client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "hi"}], stream=True
            )
            parts = [c.choices[0].delta.content async for c in stream]
        assert parts == ["t0 ", "t1 ", "t2 "]


async def test_progress_stream_ends_with_an_error_event_on_timeout(tmp_path: Path) -> None:
    async with proxy_stack(
        tmp_path,
        [make_model("tiny", cold_start_timeout_s=0.3)],
        queue_timeout=0.3,
        cold_start_timeout=0.3,
    ) as stack:
        async with httpx.AsyncClient(timeout=5) as client:
            body = {"model": "tiny", "messages": [], "stream": True}
            reply = await client.post(f"{stack.url}/v1/chat/completions", json=body)
        assert reply.status_code == 200
        assert reply.text.startswith(": flexinfer cold-start")
        assert '"code": "activation_timeout"' in reply.text


async def test_non_streaming_progress_on_request(tmp_path: Path) -> None:
    async with (
        upstreams(1) as ups,
        proxy_stack(tmp_path, [make_model("tiny")]) as stack,
        httpx.AsyncClient(timeout=5) as client,
    ):

        async def engine_starts() -> None:
            await wait_until(lambda: stack.core.queue.depth(KEY) == 1)
            await _phase(stack, "warming", 1)
            await asyncio.sleep(0.1)
            await stack.set_endpoints(KEY, [ups[0][1]])

        starting = asyncio.create_task(engine_starts())
        reply = await client.post(
            f"{stack.url}/v1/chat/completions",
            json={"model": "tiny", "messages": []},
            headers={"X-Flexinfer-Progress": "true"},
        )
        await starting
        assert reply.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in reply.text.split("\n") if line]
        assert lines[0].startswith(": flexinfer cold-start phase=queued")
        assert lines[-1].startswith('data: {"id": "chatcmpl-1"')
        # A warm model answers plain JSON, header or not.
        warm = await client.post(
            f"{stack.url}/v1/chat/completions",
            json={"model": "tiny", "messages": []},
            headers={"X-Flexinfer-Progress": "true"},
        )
        assert warm.headers["content-type"] == "application/json"
