"""Hostile clients get the right 4xx quickly; full queues lose no accepted request;
backoff, stale queues, demand depth updates; an engine dying mid-stream."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from pathlib import Path

import httpx
import openai
import pytest

from flexinfer_common.bus import topics
from flexinfer_common.bus.topics import DemandEvent
from flexinfer_proxy.core.backoff import Backoff
from flexinfer_proxy.testing import make_model
from flexinfer_proxy.testing_stack import proxy_stack, upstreams, wait_until

JSON = {"Content-Type": "application/json"}

KEY = "default/tiny"


async def _raw_request(url: str, head: bytes, body_parts: list[bytes], gap_s: float) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(head)
        for part in body_parts:
            await asyncio.sleep(gap_s)
            writer.write(part)
            await writer.drain()
        return await asyncio.wait_for(reader.read(65536), 5)
    except (ConnectionError, OSError):
        return b""
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()


async def test_hostile_inputs(tmp_path: Path) -> None:
    async with proxy_stack(
        tmp_path,
        [make_model("tiny")],
        max_body_bytes=64 * 1024,
        body_timeout_s=0.5,
        auth_tokens=["good-token"],
    ) as stack:
        auth = {"Authorization": "Bearer good-token"}
        url = f"{stack.url}/v1/chat/completions"
        async with httpx.AsyncClient(timeout=5) as client:
            cases: list[tuple[dict[str, str], bytes, int]] = [
                (auth, b'{"model": "tiny", "messages": [', 400),
                (auth, b"not json at all", 400),
                (auth, b"[]", 400),
                (auth, b'{"messages": []}', 400),
                (auth, b'{"model": 7}', 400),
                (auth, b'{"model": "../../etc/passwd"}', 400),
                (auth, b'{"model": "ti\\u0000ny"}', 400),
                (auth, b'{"model": "x\\ny"}', 400),
                (auth, b'{"model": "' + b"a" * 70_000 + b'"}', 413),
                ({**auth, "X-Model-ID": "a/../b"}, b"{}", 400),
                ({"Authorization": "Bearer"}, b'{"model": "tiny"}', 401),
                ({"Authorization": "Basic Zm9vOmJhcg=="}, b'{"model": "tiny"}', 401),
                ({"Authorization": "Bearer wrong-token"}, b'{"model": "tiny"}', 401),
                (auth, b'{"model": "no-such-model"}', 404),
            ]
            for headers, body, status in cases:
                started = time.monotonic()
                reply = await client.post(url, content=body, headers={**JSON, **headers})
                assert reply.status_code == status, (body[:40], reply.text)
                error = reply.json()["error"]
                assert set(error) == {"message", "type", "param", "code"}
                assert time.monotonic() - started < 2
        # Slowloris: headers, then a trickle of body bytes -> 408 within the body timeout.
        head = (
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer good-token\r\n"
            b"Content-Length: 100\r\nContent-Type: application/json\r\n\r\n"
        )
        started = time.monotonic()
        answer = await _raw_request(stack.url, head, [b"{", b'"', b"m"], 0.3)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
        assert time.monotonic() - started < 3
        huge = head.replace(b"Content-Length: 100", b"Content-Length: 999999999")
        assert (await _raw_request(stack.url, huge, [], 0)).startswith(b"HTTP/1.1 413")
        # Still serving after all that.
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"{stack.url}/healthz")).status_code == 200


async def test_full_queue_never_loses_an_accepted_request(tmp_path: Path) -> None:
    async with (
        upstreams(1) as ups,
        proxy_stack(tmp_path, [make_model("tiny")], max_queue_size=5, progress_sse=False) as stack,
    ):
        async with httpx.AsyncClient(timeout=10) as client:
            body = {"model": "tiny", "messages": []}
            accepted = [
                asyncio.create_task(client.post(f"{stack.url}/v1/chat/completions", json=body))
                for _ in range(5)
            ]
            await wait_until(lambda: stack.core.queue.depth(KEY) == 5)
            rejected = await asyncio.gather(
                *(client.post(f"{stack.url}/v1/chat/completions", json=body) for _ in range(7))
            )
            assert [r.status_code for r in rejected] == [503] * 7
            assert all(r.headers["retry-after"] for r in rejected)
            assert rejected[0].json()["error"]["code"] == "queue_full"
            await stack.set_endpoints(KEY, [ups[0][1]])
            done = await asyncio.gather(*accepted)
        assert [r.status_code for r in done] == [200] * 5
        # FIFO drain: the engine saw them in arrival order (one at a time here).
        assert len(ups[0][0].seen) == 5


async def test_demand_carries_depth_changes_and_stale_queues_are_cleaned(tmp_path: Path) -> None:
    async with proxy_stack(
        tmp_path,
        [make_model("tiny", cold_start_timeout_s=0.5)],
        demand_resend_interval_s=30,
        queue_timeout=0.5,
        cold_start_timeout=0.5,
    ) as stack:
        demands = stack.bus.consumer(topics.DEMAND, "t", "t")
        async with httpx.AsyncClient(timeout=5) as client:
            body = {"model": "tiny", "messages": []}
            first = asyncio.create_task(client.post(f"{stack.url}/v1/completions", json=body))
            await wait_until(lambda: stack.core.queue.depth(KEY) == 1)
            second = asyncio.create_task(client.post(f"{stack.url}/v1/completions", json=body))
            depths: list[int] = []
            deadline = time.monotonic() + 2
            while 2 not in depths and time.monotonic() < deadline:
                for message in await demands.fetch(timeout_s=0.2):
                    depths.append(DemandEvent.model_validate(message.payload).queue_depth)
            assert depths[:2] == [1, 2]  # re-published on the depth change, not after 30 s
            assert {(await first).status_code, (await second).status_code} == {503}
        assert KEY in stack.core.queue.known()  # kept while young
        assert stack.core.queue.cleanup_stale(2 * 0.5) == []
        assert stack.core.queue.cleanup_stale(1.0, now=time.monotonic() + 1.1) == [KEY]


def test_backoff_grows_with_jitter_and_stops() -> None:
    delays = list(Backoff(5, 30, 3).delays(random.Random(1)))
    assert len(delays) == 3
    for delay, base in zip(delays, (5, 10, 20), strict=True):
        assert base / 2 <= delay <= base
    capped = list(Backoff(5, 30, 6).delays(random.Random(2)))
    assert max(capped) <= 30
    assert capped[-1] >= 15


async def test_backoff_spaces_demand_resends(tmp_path: Path) -> None:
    async with proxy_stack(
        tmp_path,
        [make_model("tiny", cold_start_timeout_s=1.5)],
        backoff_enabled=True,
        backoff_initial_wait=0.2,
        backoff_max_wait=0.4,
        backoff_max_retries=2,
        queue_timeout=1.5,
        cold_start_timeout=1.5,
    ) as stack:
        demands = stack.bus.consumer(topics.DEMAND, "t", "t")
        async with httpx.AsyncClient(timeout=5) as client:
            waiting = asyncio.create_task(
                client.post(f"{stack.url}/v1/completions", json={"model": "tiny"})
            )
            seen = []
            deadline = time.monotonic() + 1.3
            while time.monotonic() < deadline:
                seen += await demands.fetch(timeout_s=0.1)
            assert (await waiting).status_code == 503
        assert len(seen) == 3  # the first demand, then max_retries re-sends, then none


async def test_engine_dying_mid_stream_ends_with_an_error_event(tmp_path: Path) -> None:
    async with (
        upstreams(1, chunks=5, die_after_chunks=2) as ups,
        proxy_stack(tmp_path, [make_model("tiny")]) as stack,
    ):
        await stack.set_endpoints(KEY, [ups[0][1]])
        async with stack.openai() as client:
            stream = await client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "hi"}], stream=True
            )
            got: list[str | None] = []

            async def read_all() -> None:
                async for chunk in stream:
                    got.append(chunk.choices[0].delta.content)

            with pytest.raises(openai.APIError, match="mid-stream"):
                await read_all()
        assert got == ["t0 ", "t1 "]
