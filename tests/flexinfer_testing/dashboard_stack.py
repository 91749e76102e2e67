"""compose.yaml's topology as processes, scraped by a real Prometheus, and the traffic that
gives every dashboard panel data (tests/deploy/test_deploy_dashboard_queries.py and
``tools/render_dashboards.py --demo``).

The stack is compose's (flexinfer_testing.compose_processes) with two changes a platform
team would make to see every board: the controller declares one 24 GiB GPU and runs the
GPU-sharing arbiter (docs/gpu-sharing.md), and the proxy limits each model's request rate,
so the traffic below can show a swap and a 429. Prometheus runs deploy/prometheus's config.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import openai

from flexinfer_testing.compose_processes import ComposeProcesses
from flexinfer_testing.prometheus import Prometheus, local_config, run_prometheus
from flexinfer_testing.services import postgres_database, require_redis
from flexinfer_testing.stack import delete_redis_keys

HEALTHY_TIMEOUT_S = 90.0
ONE_SHOT_TIMEOUT_S = 120.0
REQUEST_TIMEOUT_S = 120.0
SCRAPED_TIMEOUT_S = 30.0
GPU = [{"vendor": "nvidia", "count": 1, "arch": "sm_90", "vram": "24Gi", "node": "n1"}]
"""One declared 24 GiB GPU: the shared Models below (16 GB each) take turns on it."""
SHARED = ("shared-a", "shared-b")
EXTRA_ENV = {
    "FLEXINFER_CONTROLLER_STOP_ENGINES_ON_SHUTDOWN": "true",
    "FLEXINFER_CONTROLLER_GPUS": json.dumps(GPU),
    "FLEXINFER_CONTROLLER_GPU_SHARING_MODE": "arbiter",
    # A holder without demand for 1.5 s yields the GPU (the default 120 s suits people).
    "FLEXINFER_CONTROLLER_GPU_SHARING_DEMAND_WINDOW_S": "1.5",
    # Demand repeats well within that window, as a waiting queue must to stay live.
    "FLEXINFER_PROXY_DEMAND_RESEND_INTERVAL_S": "0.3",
    # Two requests a second per model, four at once: the burst below gets some 429s.
    "FLEXINFER_PROXY_MODEL_RATE_LIMIT_RPS": "2",
    "FLEXINFER_PROXY_MODEL_RATE_LIMIT_BURST": "4",
}
BURST = 10


@contextmanager
def dashboard_stack(
    root: Path, prometheus_binary: str
) -> Iterator[tuple[ComposeProcesses, Prometheus]]:
    """Every FlexInfer service of compose.yaml running, and Prometheus scraping them."""
    redis_url = require_redis()
    prefix = f"dash-{uuid.uuid4().hex[:8]}:"
    with postgres_database("flexinfer_dash") as database:
        procs = ComposeProcesses(
            root=root,
            secrets={
                "FLEXINFER_ADMIN_TOKEN": secrets.token_hex(24),
                "FLEXINFER_REGISTRY_P2P_TOKEN": secrets.token_hex(24),
                "POSTGRES_PASSWORD": secrets.token_hex(24),
                "GRAFANA_ADMIN_PASSWORD": secrets.token_hex(24),
            },
            overrides={
                "FLEXINFER_BUS_URL": redis_url,
                "FLEXINFER_BUS_STREAM_PREFIX": prefix,
                "FLEXINFER_STORE_URL": database,
                **EXTRA_ENV,
            },
        )
        try:
            procs.up(HEALTHY_TIMEOUT_S, ONE_SHOT_TIMEOUT_S)
            config = local_config(procs.addresses)
            with run_prometheus(prometheus_binary, root / "prometheus", config) as prom:
                static = {job["job_name"] for job in config["scrape_configs"]}
                prom.wait_scraped(static - {"engines"}, SCRAPED_TIMEOUT_S)  # none runs yet
                yield procs, prom
        finally:
            procs.stop()
            delete_redis_keys(redis_url, prefix)


def proxy_url(procs: ComposeProcesses) -> str:
    """The proxy's base URL (it is on the controller's network in compose.yaml)."""
    return f"http://127.0.0.1:{procs.port('controller', 8080)}"


def shared_model(name: str, source: str) -> dict[str, Any]:
    """A member of GPU group ``g`` that does not fit on the GPU beside the other."""
    return {
        "apiVersion": "ai.flexinfer/v1alpha2",
        "kind": "Model",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "backend": "reference",
            "source": source,
            "gpu": {"vendor": "nvidia", "shared": "g", "vramEstimateMB": 16000,
                    "swapCooldown": "1s"},
            "serverless": {"idleTimeout": "300s", "coldStartTimeout": "120s"},
        },
    }  # fmt: skip


def apply_shared_models(procs: ComposeProcesses) -> None:
    """Apply the two shared Models through the controller's admin API."""
    admin = f"http://127.0.0.1:{procs.port('controller', 8090)}/v1/admin/models"
    token = {"Authorization": f"Bearer {procs.secrets['FLEXINFER_ADMIN_TOKEN']}"}
    source = (procs.root / "model-cache" / "tiny").as_uri()  # the `models` one-shot wrote it
    for name in SHARED:
        response = httpx.put(
            f"{admin}/{name}", json=shared_model(name, source), headers=token, timeout=30
        )
        assert response.status_code in (200, 201), response.text


def _prefetch(procs: ComposeProcesses, source: str, cache_dir: Path) -> int:
    """The Model prefetch Job's command (docs/architecture.md): the source through the
    registry (EnsureModelDownloaded, then StreamModelFiles) into ``cache_dir``."""
    command = [
        sys.executable, "-m", "flexinfer_registry.client.mx_cli",
        "--server", f"127.0.0.1:{procs.port('registry', 8001)}",
        "--token", procs.secrets["FLEXINFER_ADMIN_TOKEN"],
        "model", "download", source, "--strategy", "ServerOnly", "--cache-dir", str(cache_dir),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.returncode


def registry_traffic(procs: ComposeProcesses) -> list[str]:
    """Prefetches through the registry: a miss that downloads, a hit, an eviction through
    its admin API, and a miss again; the cache keys it evicted."""
    source = (procs.root / "model-cache" / "tiny").as_uri()
    prefetched = procs.root / "prefetched"
    _prefetch(procs, source, prefetched / "1")
    _prefetch(procs, source, prefetched / "2")
    admin = f"http://127.0.0.1:{procs.port('registry', 8011)}/v1/registry/models"
    token = {"Authorization": f"Bearer {procs.secrets['FLEXINFER_ADMIN_TOKEN']}"}
    listed = httpx.get(admin, headers=token, timeout=30)
    assert listed.status_code == 200, listed.text
    keys = [m["key"] for m in listed.json() if m["status"] == "DOWNLOADED"]
    for key in keys:
        evicted = httpx.post(f"{admin}/{quote(key, safe='')}/evict", headers=token, timeout=30)
        assert evicted.status_code == 200, evicted.text
    _prefetch(procs, source, prefetched / "3")
    return keys


async def _ask(sdk: openai.AsyncOpenAI, model: str, *, stream: bool = False) -> str:
    messages: Any = [{"role": "user", "content": f"Hello {model}"}]
    if stream:
        chunks = await sdk.chat.completions.create(
            model=model, messages=messages, max_tokens=8, stream=True
        )
        return "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])
    reply = await sdk.chat.completions.create(model=model, messages=messages, max_tokens=8)
    return reply.choices[0].message.content or ""


async def _refused(sdk: openai.AsyncOpenAI, model: str, *, stream: bool = False) -> int:
    """One request's status: 200, or the error status the proxy answered."""
    try:
        await _ask(sdk, model, stream=stream)
    except openai.APIStatusError as exc:
        return exc.status_code
    return 200


async def drive_traffic(procs: ComposeProcesses, swaps: int = 1) -> dict[str, Any]:
    """A cold start, a streamed answer, an unknown model, ``swaps`` GPU swaps between the
    shared Models (each a cold start of its own) and a burst past the rate limit; what
    was answered, for the caller. Each engine start takes seconds: the test keeps to one
    swap, the pictures of docs/dashboards.md show more."""
    seen: dict[str, Any] = {}
    first = SHARED[0]
    sdk = openai.AsyncOpenAI(
        base_url=f"{proxy_url(procs)}/v1", api_key="unused", max_retries=0,
        timeout=REQUEST_TIMEOUT_S,
    )  # fmt: skip
    seen["prefetch"] = await asyncio.to_thread(registry_traffic, procs)
    async with sdk:
        apply_shared_models(procs)
        seen["cold"] = await _ask(sdk, first)  # scaled to zero, the GPU free: a cold start
        seen["stream"] = await _ask(sdk, first, stream=True)
        seen["unknown"] = await _refused(sdk, "no-such-model")
        # Each request for the Model that does not hold the GPU swaps it.
        seen["swaps"] = [await _ask(sdk, SHARED[(1 + i) % 2]) for i in range(swaps)]
        last = SHARED[swaps % 2]
        seen["burst"] = await asyncio.gather(*(_refused(sdk, last) for _ in range(BURST)))
    return seen


async def steady_traffic(procs: ComposeProcesses, model: str, seconds: float) -> None:
    """Warm requests to ``model`` for ``seconds`` (every other one streamed), with an
    unknown model now and then and a burst past the rate limit, so that the pictures of
    docs/dashboards.md show rates over time rather than one step."""
    sdk = openai.AsyncOpenAI(
        base_url=f"{proxy_url(procs)}/v1", api_key="unused", max_retries=0,
        timeout=REQUEST_TIMEOUT_S,
    )  # fmt: skip
    async with sdk:
        end = asyncio.get_running_loop().time() + seconds
        tick = 0
        while asyncio.get_running_loop().time() < end:
            tick += 1
            await _refused(sdk, model, stream=tick % 2 == 0)
            if tick % 10 == 0:
                await _refused(sdk, "no-such-model")
            if tick % 25 == 0:
                await asyncio.gather(*(_refused(sdk, model) for _ in range(BURST)))
            await asyncio.sleep(0.4)  # pacing: about two requests a second, as the limit allows
