"""External endpoints (spec.endpoints), health marking, spot-terminating endpoints."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from openai.types.chat import ChatCompletionMessageParam

from flexinfer_common.api import ModelSpec
from flexinfer_common.api.meta import utcnow
from flexinfer_common.store import EndpointRecord
from flexinfer_proxy.sync import ProxySync
from flexinfer_proxy.testing import make_model
from flexinfer_proxy.testing_stack import proxy_stack, upstreams


def test_spec_endpoints_validation() -> None:
    spec = ModelSpec(backend="external", source="external://x", endpoints=["http://h:1"])
    assert spec.is_external
    with pytest.raises(ValueError, match="http:// or https://"):
        ModelSpec(backend="external", source="external://x", endpoints=["ftp://h"])


SESSIONS = [f"session-{i}" for i in range(40)]


async def test_external_model_is_routed_and_unhealthy_endpoints_marked_out(tmp_path: Path) -> None:
    async with upstreams(2) as ups:
        model = make_model("ext")
        model.spec.endpoints = [u for _, u in ups]
        model.metadata.annotations["flexinfer.ai/routing"] = "session-affinity"
        async with proxy_stack(tmp_path, [model], health_interval_s=3600) as stack:
            assert stack.core.table.external() == {"default/ext": [u for _, u in ups]}
            messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
            async with stack.openai() as client:
                names = {
                    (
                        await client.chat.completions.create(
                            model="ext",
                            messages=messages,
                            extra_headers={"X-Session-ID": s},
                        )
                    )
                    .choices[0]
                    .message.content
                    # Ports are random, so the ring differs per run: enough sessions that
                    # both endpoints get some (all 40 on one side: p ≈ 2e-12).
                    for s in SESSIONS
                }
                assert names == {"hello from u0", "hello from u1"}
                # Active check: u1 answers 500 -> marked out; every session goes to u0.
                ups[1][0].status = 500
                sync = ProxySync(stack.core)
                async with httpx.AsyncClient() as checker:
                    await sync.check_external(checker)
                for s in SESSIONS:
                    reply = await client.chat.completions.create(
                        model="ext",
                        messages=messages,
                        extra_headers={"X-Session-ID": s},
                    )
                    assert reply.choices[0].message.content == "hello from u0"
                ups[1][0].status = 200
                async with httpx.AsyncClient() as checker:
                    await sync.check_external(checker)
                assert stack.core.table.usable_check("default/ext")(
                    stack.core.table.endpoints("default/ext")[1]
                )


async def test_terminating_endpoints_are_excluded(tmp_path: Path) -> None:
    async with upstreams(2) as ups, proxy_stack(tmp_path, [make_model("m")]) as stack:
        urls = [u for _, u in ups]
        await stack.set_endpoints("default/m", urls, terminating=frozenset({urls[0]}))
        assert stack.core.table.urls("default/m") == [urls[1]]
        async with httpx.AsyncClient() as client:
            for _ in range(3):
                reply = await client.post(f"{stack.url}/v1/chat/completions", json={"model": "m"})
                assert reply.json()["choices"][0]["message"]["content"] == "hello from u1"
        # The periodic resync reads the store, whose records carry no termination mark:
        # the endpoint must stay out of rotation.
        now = utcnow()
        for replica, url in enumerate(urls):
            await stack.store.put_endpoint(
                EndpointRecord(
                    model="default/m",
                    replica=f"r{replica}",
                    url=url,
                    ready=True,
                    node=None,
                    updated_at=now,
                )
            )
        await stack.core.resync()
        assert stack.core.table.urls("default/m") == [urls[1]]


async def test_connect_failure_retries_on_another_endpoint(tmp_path: Path) -> None:
    async with upstreams(1) as ups, proxy_stack(tmp_path, [make_model("m")]) as stack:
        dead = "http://127.0.0.1:9"  # discard port: connection refused
        await stack.set_endpoints("default/m", [dead, ups[0][1]])
        async with httpx.AsyncClient() as client:
            for _ in range(3):
                reply = await client.post(f"{stack.url}/v1/chat/completions", json={"model": "m"})
                assert reply.status_code == 200
