"""``flexinfer proxy --static NAME=URL``: the proxy alone, with no controller, bus or database."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from flexinfer_common.errors import ConflictError, InvalidSpecError
from flexinfer_common.serving import serve_in_background
from flexinfer_proxy.static import StaticStore, object_name, parse_static
from flexinfer_proxy.testing import FakeUpstream
from flexinfer_testing.stack import flexinfer_command, stop_process, wait_for_file

MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]


def test_parse_static_accepts_openai_base_urls() -> None:
    assert parse_static("gpt=http://h:8000/v1/").url == "http://h:8000"
    assert parse_static("gpt=http://h:8000").url == "http://h:8000"
    assert parse_static(" a/b:c = https://api.example.com/openai/v1").name == "a/b:c"
    assert parse_static("x=https://api.example.com/openai/v1").url == (
        "https://api.example.com/openai"
    )


@pytest.mark.parametrize(
    "value",
    ["fake", "=http://h", "x=", "x=ftp://h", "x=http://", "x=http://h/?q=1", "\x01=http://h"],
)
def test_parse_static_rejects_malformed(value: str) -> None:
    with pytest.raises(InvalidSpecError, match="--static"):
        parse_static(value)


def test_object_names_are_valid_and_distinct() -> None:
    assert object_name("fake") == "fake"
    names = {object_name(n) for n in ("Llama-3", "llama-3", "org/Model:7B", "..", "a" * 300)}
    assert len(names) == 5
    for name in names:
        assert name.replace("-", "").isalnum()
        assert len(name) <= 63


def test_parse_static_takes_the_served_name_after_a_hash() -> None:
    declared = parse_static("gpt=http://h:8000/v1#Qwen/Qwen2.5-0.5B")
    assert (declared.name, declared.url, declared.served) == (
        "gpt",
        "http://h:8000",
        "Qwen/Qwen2.5-0.5B",
    )
    assert parse_static("gpt=http://h:8000").served is None
    with pytest.raises(InvalidSpecError):
        parse_static("gpt=http://h#bad\x01name")


async def test_static_store_serves_declarations_and_refuses_writes() -> None:
    declared = [parse_static(v) for v in ("a=http://h1", "a=http://h2#served-a", "b=http://h3")]
    store = StaticStore.from_declarations(declared, "default")
    models = await store.list_models("default")
    assert [m.served_names for m in models] == [["a"], ["b"]]
    # External models: the proxy routes to their URLs, with no runtime and no records.
    assert [m.spec.endpoints for m in models] == [["http://h1", "http://h2"], ["http://h3"]]
    assert models[0].metadata.annotations == {"flexinfer.ai/upstream-model": "served-a"}
    assert await store.list_endpoints() == []
    assert await store.list_models("other") == []
    with pytest.raises(ConflictError):
        await store.create_model(models[0])
    await store.close()


@asynccontextmanager
async def static_proxy(tmp_path: Path, *static: str) -> AsyncIterator[str]:
    """``flexinfer proxy --static ... --port 0`` as a subprocess; yields its URL."""
    ready = tmp_path / "ready.json"
    env = {**os.environ, "FLEXINFER_READY_FILE": str(ready)}
    args = [arg for value in static for arg in ("--static", value)]
    cmd = flexinfer_command("proxy", *args, "--port", "0")
    # Run from an empty directory: the proxy must not create a database anywhere.
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL)  # noqa: ASYNC220
    try:
        urls = await asyncio.to_thread(wait_for_file, ready, proc, 60)
        yield urls["proxy"]
    finally:
        code = await asyncio.to_thread(stop_process, proc, signal.SIGTERM)
    assert code == 0
    assert sorted(os.listdir(tmp_path)) == ["ready.json"]


async def test_static_proxy_serves_openai_clients(tmp_path: Path) -> None:
    upstream = FakeUpstream(name="u0", chunks=4)
    async with (
        serve_in_background(upstream) as url,
        static_proxy(tmp_path, f"fake={url}/v1", f"Other/Model={url}") as proxy,
    ):
        client = openai.AsyncOpenAI(base_url=f"{proxy}/v1", api_key="unused", max_retries=0)
        async with client:
            reply = await client.chat.completions.create(model="fake", messages=MESSAGES)
            assert reply.choices[0].message.content == "hello from u0"
            stream = await client.chat.completions.create(
                model="Other/Model", messages=MESSAGES, stream=True
            )
            parts = [c.choices[0].delta.content async for c in stream if c.choices]
            assert "".join(p or "" for p in parts) == "t0 t1 t2 t3 "
            listed = sorted(m.id for m in (await client.models.list()).data)
            assert listed == ["Other/Model", "fake"]
            with pytest.raises(openai.NotFoundError) as missing:
                await client.chat.completions.create(model="missing", messages=MESSAGES)
            assert missing.value.code == "model_not_found"
    # The model name reached the upstream unchanged, on the path the client used.
    assert [s.path for s in upstream.seen] == ["/v1/chat/completions"] * 2
    assert [s.json()["model"] for s in upstream.seen] == ["fake", "Other/Model"]


async def test_static_models_are_sent_as_what_the_upstream_serves(tmp_path: Path) -> None:
    named = FakeUpstream(name="named")
    single = FakeUpstream(name="single", serves=["Qwen/Qwen2.5-0.5B"])
    async with (
        serve_in_background(named) as named_url,
        serve_in_background(single) as single_url,
        static_proxy(tmp_path, f"a={named_url}#served-a", f"b={single_url}") as proxy,
    ):
        client = openai.AsyncOpenAI(base_url=f"{proxy}/v1", api_key="unused", max_retries=0)
        async with client:
            await client.chat.completions.create(model="a", messages=MESSAGES)
            # Its /v1/models lists one model: asked before the proxy serves anything.
            await client.chat.completions.create(model="b", messages=MESSAGES)
    assert named.seen[-1].json()["model"] == "served-a"
    assert single.seen[-1].json()["model"] == "Qwen/Qwen2.5-0.5B"


def test_static_flag_errors_exit_2(tmp_path: Path) -> None:
    cmd = flexinfer_command("proxy", "--static", "nourl", "--port", "0")
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 2
    assert "--static 'nourl': expected NAME=URL" in done.stderr


async def test_a_dead_static_upstream_is_a_502_at_once(tmp_path: Path) -> None:
    async with serve_in_background(FakeUpstream()) as url:
        pass  # stopped: nothing listens there any more
    async with static_proxy(tmp_path, f"gone={url}") as proxy:
        client = openai.AsyncOpenAI(base_url=f"{proxy}/v1", api_key="unused", max_retries=0)
        async with client:
            for _ in range(2):
                with pytest.raises(openai.APIStatusError) as failed:
                    await asyncio.wait_for(
                        client.chat.completions.create(model="gone", messages=MESSAGES), 30
                    )
                assert failed.value.status_code == 502
