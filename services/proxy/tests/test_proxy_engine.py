"""The proxy in front of the real reference engine, started as a process on a cold start."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import openai
import pytest

from flexinfer_common.bus import topics
from flexinfer_common.bus.memory import MemoryBus
from flexinfer_common.bus.topics import DemandEvent, EndpointInfo
from flexinfer_common.settings import StoreSettings
from flexinfer_common.store import create_store
from flexinfer_proxy.app import create_app
from flexinfer_proxy.serve import serve_proxy_in_background
from flexinfer_proxy.settings import ProxySettings
from flexinfer_proxy.testing import make_model
from flexinfer_proxy.testing_stack import announce_endpoints

pytestmark = pytest.mark.slow


async def _run(*args: str) -> None:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "flexinfer_engine", *args)
    assert await proc.wait() == 0


@contextlib.asynccontextmanager
async def engine_process(model_dir: Path, name: str) -> AsyncIterator[str]:
    """Start ``flexinfer_engine serve`` and yield its URL once it reports ready."""
    read_fd, write_fd = os.pipe()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "flexinfer_engine",
        "serve",
        "--model-dir",
        str(model_dir),
        "--served-model-name",
        name,
        "--ready-fd",
        str(write_fd),
        pass_fds=(write_fd,),
    )
    os.close(write_fd)
    try:
        with os.fdopen(read_fd, "rb") as ready:
            line = await asyncio.wait_for(asyncio.to_thread(ready.readline), 120)
        yield str(json.loads(line)["url"])
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()


async def test_cold_request_is_served_by_the_engine_once_it_starts(tmp_path: Path) -> None:
    model_dir = tmp_path / "tiny"
    await _run("generate", "tiny", "--out", str(model_dir), "--preset", "tiny")
    bus = MemoryBus()
    store = create_store(StoreSettings(url=f"sqlite:///{tmp_path}/store.db"))
    await store.create_model(make_model("tiny", served_name="tiny"))
    demands = bus.consumer(topics.DEMAND, "test", "t")
    settings = ProxySettings(port=0, instance_id="e2e")
    app = create_app(settings, bus=bus, store=store)
    proxy = app.pipeline
    assert proxy is not None
    try:
        async with serve_proxy_in_background(app, server=settings.server) as url:
            client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
            async with client:
                request = asyncio.create_task(
                    client.chat.completions.create(
                        model="tiny",
                        messages=[{"role": "user", "content": "hello"}],
                        max_tokens=8,
                        stream=True,
                    )
                )
                # Play the controller: on the demand, start an engine and announce it,
                # in the store first (the proxy's periodic resync reads it) and on the bus.
                message = (await demands.fetch(timeout_s=10))[0]
                assert DemandEvent.model_validate(message.payload).model == "default/tiny"
                async with engine_process(model_dir, "tiny") as engine_url:
                    endpoint = EndpointInfo(url=engine_url, replica="p1")
                    await announce_endpoints(store, bus, "default/tiny", [endpoint], 1)
                    stream = await asyncio.wait_for(request, 60)
                    chunks = [chunk async for chunk in stream]
                    # The periodic store resync may come before the next request (a busy
                    # machine once put it there): the endpoint must survive it.
                    await proxy.core.resync()
                    reply = await client.chat.completions.create(
                        model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=4
                    )
    finally:
        await bus.close()
        await store.close()
    assert chunks
    assert all(c.model == "tiny" for c in chunks)
    assert reply.choices[0].finish_reason in {"stop", "length"}
