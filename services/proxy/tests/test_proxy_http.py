"""The proxy over real sockets: forwarding, streaming, errors, aliases, model listing."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import openai
import pytest

from flexinfer_common.serving import serve_in_background as serve_asgi
from flexinfer_proxy.testing import FakeUpstream, make_model
from flexinfer_proxy.testing_stack import ProxyStack, proxy_stack, wait_until

JSON = {"content-type": "application/json"}


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[ProxyStack]:
    """A proxy serving model ``tiny`` (alias ``tiny-alias``) with no endpoints yet."""
    async with proxy_stack(tmp_path, [make_model("tiny", aliases=["tiny-alias"])]) as running:
        yield running


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[FakeUpstream, str]]:
    """A fake OpenAI server on a free port."""
    fake = FakeUpstream()
    async with serve_asgi(fake) as url:
        yield fake, url


async def test_chat_completion_is_forwarded(
    stack: ProxyStack, upstream: tuple[FakeUpstream, str]
) -> None:
    fake, url = upstream
    await stack.set_endpoints("default/tiny", [url])
    client = stack.openai()
    async with client:
        reply = await client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}]
        )
    assert reply.choices[0].message.content == "hello from upstream"
    assert fake.seen[-1].path == "/v1/chat/completions"
    assert fake.seen[-1].json()["model"] == "tiny"


async def test_body_bytes_untouched_when_no_rewrite(
    stack: ProxyStack, upstream: tuple[FakeUpstream, str]
) -> None:
    fake, url = upstream
    await stack.set_endpoints("default/tiny", [url])
    raw = b'{"model":   "tiny", "input": "x",  "extra": [1, 2]}'
    async with httpx.AsyncClient() as client:
        response = await client.post(f"{stack.url}/v1/completions?x=1", content=raw, headers=JSON)
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "hello from upstream"
    assert fake.seen[-1].body == raw


async def test_alias_rewrites_model_in_body(tmp_path: Path) -> None:
    big = make_model("big", served_name="org/big-v1", aliases=["big"])
    fake = FakeUpstream()
    async with serve_asgi(fake) as up, proxy_stack(tmp_path, [big]) as stack:
        await stack.set_endpoints("default/big", [up])
        async with httpx.AsyncClient() as client:
            body = {"model": "big", "prompt": "héllo", "max_tokens": 3}
            response = await client.post(f"{stack.url}/v1/completions", json=body)
    assert response.status_code == 200
    assert fake.seen[-1].json() == {"model": "org/big-v1", "prompt": "héllo", "max_tokens": 3}


async def test_unknown_model_is_404_for_the_openai_sdk(stack: ProxyStack) -> None:
    client = stack.openai()
    async with client:
        with pytest.raises(openai.NotFoundError) as info:
            await client.chat.completions.create(
                model="nope", messages=[{"role": "user", "content": "hi"}]
            )
    assert info.value.code == "model_not_found"


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "JSON object"),
        (b'{"messages": []}', "model"),
        (b'{"model": 7}', "model"),
        (b'{"model": "tiny", "stream": "yes"}', "'stream'"),
        (b'{"stream": 1, "model": "tiny"}', "'stream'"),
        (b"[" * 100_000 + b"]" * 100_000, "JSON"),
    ],
)
async def test_bad_bodies_are_400(stack: ProxyStack, body: bytes, fragment: str) -> None:
    async with httpx.AsyncClient() as client:
        response = await client.post(f"{stack.url}/v1/chat/completions", content=body, headers=JSON)
    assert response.status_code == 400
    error = response.json()["error"]
    assert fragment in error["message"]
    assert error["type"] == "invalid_request_error"


@pytest.mark.parametrize("headers", [{}, {"x-model-id": "tiny"}, {"content-type": ""}])
async def test_a_body_of_no_declared_type_is_400_and_not_forwarded(
    stack: ProxyStack, upstream: tuple[FakeUpstream, str], headers: dict[str, str]
) -> None:
    fake, url = upstream
    await stack.set_endpoints("default/tiny", [url])
    body = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "hi"}]})
    async with httpx.AsyncClient() as client:
        response = await client.post(
            f"{stack.url}/v1/chat/completions", content=body, headers=headers
        )
        assert response.status_code == 400
        error = response.json()["error"]
        assert "no Content-Type header" in error["message"]
        assert (error["type"], error["param"]) == ("invalid_request_error", None)
        assert fake.seen == []
        declared = await client.post(
            f"{stack.url}/v1/chat/completions", content=body, headers={**headers, **JSON}
        )
    assert declared.status_code == 200


async def test_body_too_large_is_413(tmp_path: Path) -> None:
    async with proxy_stack(tmp_path, [], max_body_bytes=2048) as stack:
        big = json.dumps({"model": "tiny", "prompt": "x" * 4000}).encode()

        async def chunked() -> AsyncIterator[bytes]:
            for start in range(0, len(big), 500):
                yield big[start : start + 500]

        async with httpx.AsyncClient() as client:
            declared = await client.post(f"{stack.url}/v1/completions", content=big, headers=JSON)
            streamed = await client.post(
                f"{stack.url}/v1/completions", content=chunked(), headers=JSON
            )
    for response in (declared, streamed):
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "request_too_large"


async def test_streaming_through_the_openai_sdk(
    stack: ProxyStack, upstream: tuple[FakeUpstream, str]
) -> None:
    _, url = upstream
    await stack.set_endpoints("default/tiny", [url])
    client = stack.openai()
    async with client:
        stream = await client.chat.completions.create(
            model="tiny-alias", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream])
    assert text == "t0 t1 t2 "


async def test_streaming_is_incremental(stack: ProxyStack) -> None:
    fake = FakeUpstream(chunks=4, chunk_delay_s=0.25)
    async with serve_asgi(fake) as url:
        await stack.set_endpoints("default/tiny", [url])
        body = {"model": "tiny", "messages": [], "stream": True}
        async with (
            httpx.AsyncClient() as client,
            client.stream("POST", f"{stack.url}/v1/chat/completions", json=body) as response,
        ):
            arrivals = [time.monotonic() async for _ in response.aiter_raw()]
    assert response.headers["content-type"].startswith("text/event-stream")
    # The first chunk reached the client while the upstream still had ~0.75 s to go.
    assert arrivals[0] < fake.finished_at[0] - 0.5
    assert len(arrivals) >= 4


async def test_upstream_dying_mid_stream_ends_the_client_stream(stack: ProxyStack) -> None:
    fake = FakeUpstream(chunks=5, die_after_chunks=2)
    async with serve_asgi(fake) as url:
        await stack.set_endpoints("default/tiny", [url])
        client = stack.openai()
        received: list[str] = []
        async with client, asyncio.timeout(10):
            stream = await client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "hi"}], stream=True
            )

            async def consume() -> None:
                async for chunk in stream:
                    received.append(chunk.choices[0].delta.content or "")

            with pytest.raises(openai.APIError, match="failed mid-stream"):
                await consume()
    assert received == ["t0 ", "t1 "]


def _refused_url() -> str:
    """A URL on which nothing listens (a port just released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


async def test_connect_failure_is_retried_on_another_endpoint(
    stack: ProxyStack, upstream: tuple[FakeUpstream, str]
) -> None:
    fake, url = upstream
    dead = _refused_url()
    await stack.set_endpoints("default/tiny", [dead, url])
    async with httpx.AsyncClient() as client:
        for _ in range(4):
            response = await client.post(
                f"{stack.url}/v1/chat/completions", json={"model": "tiny", "messages": []}
            )
            assert response.status_code == 200
    assert len(fake.seen) == 4
    assert stack.core.table.pick("default/tiny") is not None
    assert stack.core.table.usable("default/tiny")


async def test_upstream_errors_pass_through(stack: ProxyStack) -> None:
    fake = FakeUpstream(status=429)
    async with serve_asgi(fake) as url:
        await stack.set_endpoints("default/tiny", [url])
        async with httpx.AsyncClient() as client:
            response = await client.post(
                f"{stack.url}/v1/chat/completions", json={"model": "tiny", "messages": []}
            )
    assert response.status_code == 429
    assert response.json()["error"]["code"] == "nope"


async def test_models_are_listed_and_retrieved(stack: ProxyStack) -> None:
    client = stack.openai()
    async with client:
        page = await client.models.list()
        one = await client.models.retrieve("tiny-alias")
        with pytest.raises(openai.NotFoundError):
            await client.models.retrieve("missing")
    assert sorted(m.id for m in page.data) == ["tiny", "tiny-alias"]
    assert all(m.owned_by == "flexinfer" and m.object == "model" for m in page.data)
    assert one.id == "tiny-alias"
    assert one.model_extra == {"parent": None}


async def test_a_route_the_models_backend_lacks_is_openais_not_found(
    stack: ProxyStack, upstream: tuple[FakeUpstream, str]
) -> None:
    fake, url = upstream
    await stack.set_endpoints("default/tiny", [url])
    async with stack.openai() as client:
        with pytest.raises(openai.NotFoundError) as raised:
            await client.embeddings.create(model="tiny", input="hello")
    assert (raised.value.type, raised.value.code) == ("invalid_request_error", "not_found")
    assert "Invalid URL (POST /v1/embeddings)" in raised.value.message
    assert fake.seen == []


async def test_model_created_after_start_is_found(
    stack: ProxyStack, upstream: tuple[FakeUpstream, str]
) -> None:
    _, url = upstream
    await stack.store.create_model(make_model("late"))
    await stack.set_endpoints("default/late", [url])
    async with httpx.AsyncClient() as client:
        response = await client.post(
            f"{stack.url}/v1/chat/completions", json={"model": "late", "messages": []}
        )
    assert response.status_code == 200


async def test_health_ready_and_metrics(
    stack: ProxyStack, upstream: tuple[FakeUpstream, str]
) -> None:
    _, url = upstream
    await stack.set_endpoints("default/tiny", [url])
    async with httpx.AsyncClient(base_url=stack.url) as client:
        await client.post("/v1/chat/completions", json={"model": "tiny", "messages": []})
        health = await client.get("/healthz")
        ready = await client.get("/readyz")
        metrics = (await client.get("/metrics")).text
    assert health.status_code == 200
    assert ready.status_code == 200
    route = 'route="/v1/chat/completions"'
    assert (
        f'flexinfer_proxy_requests_total{{code="200",model="default/tiny",{route}}} 1.0' in metrics
    )
    assert "flexinfer_proxy_active_connections" in metrics


async def test_client_disconnect_mid_stream_cancels_the_request(stack: ProxyStack) -> None:
    fake = FakeUpstream(chunks=20, chunk_delay_s=0.2)
    async with serve_asgi(fake) as url:
        await stack.set_endpoints("default/tiny", [url])
        body = {"model": "tiny", "messages": [], "stream": True}
        async with httpx.AsyncClient() as client:
            async with client.stream(
                "POST", f"{stack.url}/v1/chat/completions", json=body
            ) as response:
                async for _ in response.aiter_raw():
                    break
            assert stack.core.activity.active("default/tiny") == 1
        # The proxy notices the disconnect and drops the upstream stream long before the
        # upstream's 4 s would be over.
        await wait_until(lambda: fake.aborted == 1, 2.0)
        assert stack.core.activity.active("default/tiny") == 0
        assert not fake.finished_at
