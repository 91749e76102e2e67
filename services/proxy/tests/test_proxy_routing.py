"""Routing strategies: the CRC32 ring moves ~1/N keys, per-model choice, each strategy."""

from __future__ import annotations

from pathlib import Path

import httpx

from flexinfer_common.api import ObjectMeta
from flexinfer_common.bus.topics import EndpointInfo
from flexinfer_proxy.core.routing.base import LoadTracker, RouteContext, StrategyDeps
from flexinfer_proxy.core.routing.hashed import PrefixRouting, SessionAffinity
from flexinfer_proxy.core.routing.keys import prefix_key, session_key
from flexinfer_proxy.core.routing.least_loaded import LeastLoaded
from flexinfer_proxy.core.routing.registry import Router
from flexinfer_proxy.core.routing.ring import VNODES, HashRing
from flexinfer_proxy.testing import make_model
from flexinfer_proxy.testing_stack import proxy_stack, upstreams

KEYS = [f"session-{i}" for i in range(20_000)]


def _deps(loads: LoadTracker | None = None, index: int = 100) -> StrategyDeps:
    return StrategyDeps(loads or LoadTracker(), index, 128, 512, 256)


def _eps(*urls: str) -> list[EndpointInfo]:
    return [EndpointInfo(url=u, replica=u) for u in urls]


def _ctx(
    headers: dict[str, str] | None = None, body: dict[str, object] | None = None
) -> RouteContext:
    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    return RouteContext(raw, body)


def test_ring_moves_about_one_nth_of_keys_when_a_node_joins_or_leaves() -> None:
    nodes = [f"http://10.0.0.{i}:8000" for i in range(4)]
    before = HashRing(nodes)
    assert len(before._hashes) == 4 * VNODES
    joined = HashRing([*nodes, "http://10.0.0.9:8000"])
    moved = sum(before.lookup(k) != joined.lookup(k) for k in KEYS) / len(KEYS)
    # Ideal: 1/5 of keys move to the new node, and only to it.
    assert 0.12 < moved < 0.28, moved
    assert all(
        joined.lookup(k) == "http://10.0.0.9:8000"
        for k in KEYS
        if before.lookup(k) != joined.lookup(k)
    )
    left = HashRing(nodes[1:])
    moved_out = sum(before.lookup(k) != left.lookup(k) for k in KEYS) / len(KEYS)
    assert 0.15 < moved_out < 0.35, moved_out  # ideal 1/4: exactly the leaver's keys
    assert all(before.lookup(k) == nodes[0] for k in KEYS if before.lookup(k) != left.lookup(k))
    counts = dict.fromkeys(nodes, 0)
    for key in KEYS:
        counts[before.lookup(key) or ""] += 1
    assert min(counts.values()) > len(KEYS) / 4 * 0.7  # 150 vnodes spread load evenly


def test_ring_skips_unusable_nodes_and_empty_ring() -> None:
    ring = HashRing(["a", "b"])
    owner = ring.lookup("k")
    other = ring.lookup("k", lambda n: n != owner)
    assert other is not None
    assert other != owner
    assert ring.lookup("k", lambda n: False) is None
    assert HashRing([]).lookup("k") is None


def test_session_key_precedence() -> None:
    messages = [{"role": "user", "content": str(i)} for i in range(8)]
    both = {"x-session-id": "s", "x-conversation-id": "c"}
    assert session_key(_ctx(both, {"session_id": "b"}), 128) == "s"
    assert session_key(_ctx({"x-conversation-id": "c"}, {"session_id": "b"}), 128) == "c"
    assert session_key(_ctx(body={"session_id": "b", "messages": messages}), 128) == "b"
    hashed = session_key(_ctx(body={"messages": messages}), 128)
    changed_late = session_key(_ctx(body={"messages": [*messages[:5], {"x": 1}]}), 128)
    assert hashed is not None
    assert len(hashed) == 64
    assert hashed == changed_late
    assert session_key(_ctx({"x-session-id": "x" * 1000}), 128) == "x" * 128
    assert session_key(_ctx(), 128) is None


def test_prefix_key_groups_by_system_prompt_and_first_user_message() -> None:
    def chat(system: str, user: str, later: str) -> dict[str, object]:
        return {
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
                {"role": "assistant", "content": later},
            ]
        }

    same = prefix_key(_ctx(body=chat("sys", "doc", "a")), 128, 512, 256)
    assert same == prefix_key(_ctx(body=chat("sys", "doc", "b")), 128, 512, 256)
    assert same != prefix_key(_ctx(body=chat("other", "doc", "a")), 128, 512, 256)
    assert (
        prefix_key(_ctx({"x-flexinfer-cache-key": "h"}, {"cache_key": "b"}), 128, 512, 256) == "h"
    )
    assert prefix_key(_ctx(body={"cacheKey": "b"}), 128, 512, 256) == "b"
    assert prefix_key(_ctx(body={"prompt": "abc"}), 128, 512, 256) is not None
    assert prefix_key(_ctx(), 128, 512, 256) is None


def test_affinity_is_sticky_and_fails_over() -> None:
    strategy = SessionAffinity(_deps())
    eps = _eps("http://a", "http://b", "http://c")
    ctx = _ctx({"x-session-id": "user-42"})
    first = strategy.pick("m", eps, lambda e: True, ctx)
    assert first is not None
    assert all(strategy.pick("m", eps, lambda e: True, ctx) == first for _ in range(20))
    other = strategy.pick("m", eps, lambda e: e != first, ctx)
    assert other is not None
    assert other != first


def test_prefix_index_is_bounded() -> None:
    strategy = PrefixRouting(_deps(index=50))
    eps = _eps("http://a", "http://b")
    for i in range(1000):
        strategy.pick("m", eps, lambda e: True, _ctx({"x-flexinfer-cache-key": f"k{i}"}))
    assert len(strategy.index) == 50


def test_prefix_assignment_survives_an_endpoint_joining() -> None:
    strategy = PrefixRouting(_deps(index=1000))
    two, three = _eps("http://a", "http://b"), _eps("http://a", "http://b", "http://c")
    ctxs = [_ctx({"x-flexinfer-cache-key": f"k{i}"}) for i in range(200)]
    before = [strategy.pick("m", two, lambda e: True, c) for c in ctxs]
    after = [strategy.pick("m", three, lambda e: True, c) for c in ctxs]
    assert before == after  # warm caches stay where they are


def test_least_loaded_picks_fewest_connections() -> None:
    loads = LoadTracker()
    strategy = LeastLoaded(_deps(loads))
    eps = _eps("http://a", "http://b", "http://c")
    for url, n in (("http://a", 3), ("http://b", 1), ("http://c", 2)):
        for _ in range(n):
            loads.begin(url)
    assert {strategy.pick("m", eps, lambda e: True, _ctx()).url for _ in range(5)} == {"http://b"}  # type: ignore[union-attr]
    loads.end("http://a")
    loads.end("http://a")
    loads.end("http://a")
    assert strategy.pick("m", eps, lambda e: True, _ctx()).url == "http://a"  # type: ignore[union-attr]


def test_router_reads_the_annotation() -> None:
    router = Router(_deps())
    model = make_model("m")
    assert router.strategy_name(model) == "default"
    for name in ("session-affinity", "prefix", "least-loaded"):
        annotated = model.model_copy(
            update={"metadata": ObjectMeta(name="m", annotations={"flexinfer.ai/routing": name})}
        )
        assert router.strategy_name(annotated) == name
    bogus = model.model_copy(
        update={"metadata": ObjectMeta(name="m", annotations={"flexinfer.ai/routing": "nope"})}
    )
    assert router.strategy_name(bogus) == "default"


async def test_session_affinity_over_http(tmp_path: Path) -> None:
    model = make_model("chat")
    model.metadata.annotations["flexinfer.ai/routing"] = "session-affinity"
    async with upstreams(3) as ups, proxy_stack(tmp_path, [model, make_model("plain")]) as stack:
        urls = [u for _, u in ups]
        await stack.set_endpoints("default/chat", urls)
        await stack.set_endpoints("default/plain", urls)
        body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
        async with httpx.AsyncClient() as client:
            served = set()
            for session in ("alice", "bob", "carol", "dave"):
                names = set()
                for _ in range(4):
                    reply = await client.post(
                        f"{stack.url}/v1/chat/completions",
                        json=body,
                        headers={"X-Session-ID": session},
                    )
                    names.add(reply.json()["choices"][0]["message"]["content"])
                assert len(names) == 1  # every request of a session on one engine
                served |= names
            # Without a strategy annotation: round-robin over all three.
            plain = {**body, "model": "plain"}
            spread = set()
            for _ in range(3):
                reply = await client.post(f"{stack.url}/v1/chat/completions", json=plain)
                spread.add(reply.json()["choices"][0]["message"]["content"])
        assert len(spread) == 3


async def test_least_loaded_over_http_avoids_a_busy_engine(tmp_path: Path) -> None:
    model = make_model("ll")
    model.metadata.annotations["flexinfer.ai/routing"] = "least-loaded"
    async with (
        upstreams(2, chunks=40, chunk_delay_s=0.05) as ups,
        proxy_stack(tmp_path, [model]) as stack,
    ):
        await stack.set_endpoints("default/ll", [u for _, u in ups])
        stream = {"model": "ll", "messages": [], "stream": True}
        url = f"{stack.url}/v1/chat/completions"
        async with (
            httpx.AsyncClient(timeout=10) as client,
            client.stream("POST", url, json=stream) as r,
        ):
            chunks = r.aiter_raw().__aiter__()
            await chunks.__anext__()  # the stream is open (breaking a loop would close it)
            busy = next(f.name for f, _ in ups if f.seen)
            for _ in range(4):
                reply = await client.post(
                    f"{stack.url}/v1/chat/completions", json={"model": "ll", "messages": []}
                )
                assert reply.json()["choices"][0]["message"]["content"] != f"hello from {busy}"
            await chunks.aclose()  # type: ignore[attr-defined]
