"""The proxy's /metrics after real traffic through a real proxy to real upstreams: every
family the docs list, with its labels, read back with prometheus_client's parser."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from flexinfer_common.bus import topics
from flexinfer_common.bus.topics import ProgressEvent
from flexinfer_proxy.testing import make_model
from flexinfer_proxy.testing_stack import proxy_stack, upstreams, wait_until
from flexinfer_testing.scrape import (
    check_conventions,
    check_families,
    sample_value,
    scrape,
    wait_for_sample,
)

CHAT = "/v1/chat/completions"
PROXY_FAMILIES = {
    "flexinfer_proxy_requests": {"model", "route", "code"},
    "http_requests": {"handler", "method", "status"},
    "flexinfer_proxy_request_duration_seconds": {"model", "route"},
    "flexinfer_proxy_ttfb_seconds": {"model", "route"},
    "flexinfer_proxy_ttft_seconds": {"model"},
    "flexinfer_proxy_queue_depth": {"model"},
    "flexinfer_proxy_queue_wait_seconds": {"model"},
    "flexinfer_proxy_cold_starts": {"model"},
    "flexinfer_proxy_cold_start_phase_duration_seconds": {"model", "phase"},
    "flexinfer_proxy_cold_start_duration_seconds": {"model"},
    "flexinfer_proxy_active_connections": {"model"},
    "flexinfer_proxy_rate_limited": {"model"},
}


def chat(model: str, *, stream: bool = False) -> dict[str, object]:
    """A chat request body."""
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream}


async def test_every_family_after_warm_streamed_cold_and_refused_requests(
    tmp_path: Path,
) -> None:
    models = [make_model("warm"), make_model("cold")]
    limits: dict[str, Any] = {"model_rate_limit_rps": 0.001, "model_rate_limit_burst": 3}
    async with (
        upstreams(1) as [(_, url)],
        proxy_stack(tmp_path, models, **limits) as stack,
        httpx.AsyncClient(base_url=stack.url) as client,
    ):
        await stack.set_endpoints("default/warm", [url])
        assert (await client.post(CHAT, json=chat("warm"))).status_code == 200
        assert (await client.post(CHAT, json=chat("warm", stream=True))).status_code == 200
        assert (await client.post(CHAT, json=chat("nope"))).status_code == 404
        assert (await client.post("/v1/nothing", json=chat("warm"))).status_code == 404
        assert (await client.post(CHAT, json=chat("warm"))).status_code == 200
        assert (await client.post(CHAT, json=chat("warm"))).status_code == 429

        cold = asyncio.create_task(client.post(CHAT, json=chat("cold"), timeout=30))
        await wait_for_sample(client, "flexinfer_proxy_cold_starts_total", 1, model="default/cold")
        at = datetime.now(UTC)
        progress = ProgressEvent(model="default/cold", phase="loading-weights", at=at)
        await stack.bus.publish(topics.PROGRESS, progress.model_dump(mode="json"))
        await wait_until(lambda: stack.core.progress.latest("default/cold") is not None)
        await stack.set_endpoints("default/cold", [url])
        assert (await cold).status_code == 200
        families = await scrape(client)

    check_families(families, PROXY_FAMILIES)
    check_conventions(families)

    def value(name: str, **labels: str) -> float | None:
        return sample_value(families, name, **labels)

    requests = "flexinfer_proxy_requests_total"
    assert value(requests, model="default/warm", route=CHAT, code="200") == 3
    assert value(requests, model="default/warm", route=CHAT, code="429") == 1
    assert value(requests, model="", route=CHAT, code="404") == 1
    assert value(requests, model="", route="none", code="404") == 1
    assert value("http_requests_total", handler=CHAT, method="POST", status="200") == 4
    assert value("flexinfer_proxy_rate_limited_total", model="default/warm") == 1
    duration = "flexinfer_proxy_request_duration_seconds_count"
    assert value(duration, model="default/warm", route=CHAT) == 4
    assert value("flexinfer_proxy_ttfb_seconds_count", model="default/cold", route=CHAT) == 1
    assert value("flexinfer_proxy_ttft_seconds_count", model="default/warm") == 1
    phases = "flexinfer_proxy_cold_start_phase_duration_seconds_count"
    assert value(phases, model="default/cold", phase="queued") == 1
    assert value(phases, model="default/cold", phase="loading-weights") == 1
    assert value("flexinfer_proxy_cold_start_duration_seconds_count", model="default/cold") == 1
    # No label carries anything but a declared model, a route or a status.
    models_seen = {s.labels.get("model") for f in families.values() for s in f.samples}
    assert models_seen <= {None, "", "default/warm", "default/cold"}
