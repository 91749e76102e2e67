"""The controller with the real reference engine (python -m flexinfer_engine serve)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from flexinfer_common.bus import topics
from flexinfer_common.telemetry import SD_ENGINES_PATH
from flexinfer_controller.testing import kill_engines, model_doc, run_controller
from flexinfer_testing.scrape import check_conventions, check_families, sample_value, scrape

pytestmark = pytest.mark.slow


@pytest.fixture
def model_dir(tmp_path: Path) -> Iterator[Path]:
    out = tmp_path / "tiny"
    subprocess.run(
        [sys.executable, "-m", "flexinfer_engine", "generate", "tiny", "--out", str(out),
         "--preset", "tiny"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    yield out
    assert kill_engines(tmp_path) == [], "a test left engines running"


async def test_real_engine_cold_start_serve_and_delete(tmp_path: Path, model_dir: Path) -> None:
    async with run_controller(tmp_path, engine_python=sys.executable) as h:
        doc = model_doc("tiny", model_dir.as_uri(), idle_timeout="60s")
        doc["spec"]["litellm"] = {"servedModelName": "tiny-chat"}
        assert (await h.client.put("/v1/admin/models/tiny", json=doc)).status_code == 201
        await h.wait_phase("tiny", "Idle")
        began = time.monotonic()
        await h.publish(
            topics.DEMAND,
            topics.DemandEvent(model="default/tiny", queue_depth=1, since=datetime.now(UTC),
                               proxy="test"),
        )  # fmt: skip
        event = await h.endpoints_event("default/tiny", timeout_s=120, count=1)
        cold_start_s = time.monotonic() - began
        url = event.endpoints[0].url
        async with httpx.AsyncClient(base_url=url, timeout=30) as engine:
            models = (await engine.get("/v1/models")).json()
            assert [m["id"] for m in models["data"]] == ["tiny-chat"]
            info = (await engine.get("/engine/info")).json()
            reply = await engine.post(
                "/v1/completions", json={"model": "tiny-chat", "prompt": "hi", "max_tokens": 2}
            )
            assert reply.status_code == 200
        assert cold_start_s < 120
        ready = await h.wait_phase("tiny", "Ready")
        assert ready.status.endpoint == url
        state = (tmp_path / "data" / "engines" / f"{event.endpoints[0].replica}.json").read_text()
        assert f'"pid":{info["pid"]}' in state
        assert (await h.client.delete("/v1/admin/models/tiny")).status_code == 204
        empty = await h.endpoints_event("default/tiny", count=0)
        assert empty.endpoints == []


async def test_prometheus_finds_the_engine_through_service_discovery(
    tmp_path: Path, model_dir: Path
) -> None:
    async with run_controller(tmp_path, engine_python=sys.executable) as h:
        doc = model_doc("tiny", model_dir.as_uri(), idle_timeout="60s")
        assert (await h.client.put("/v1/admin/models/tiny", json=doc)).status_code == 201
        await h.wait_phase("tiny", "Idle")
        assert (await h.client.get(SD_ENGINES_PATH)).json() == []
        await h.publish(
            topics.DEMAND,
            topics.DemandEvent(model="default/tiny", queue_depth=1, since=datetime.now(UTC),
                               proxy="test"),
        )  # fmt: skip
        event = await h.endpoints_event("default/tiny", timeout_s=120, count=1)
        await h.wait_phase("tiny", "Ready")
        groups = (await h.client.get(SD_ENGINES_PATH)).json()
        assert len(groups) == 1
        [group] = groups
        replica = event.endpoints[0].replica
        assert group["labels"] == {
            "model": "default/tiny",
            "replica": replica,
            "backend": "reference",
            "__scheme__": "http",
            "__metrics_path__": "/metrics",
        }
        [target] = group["targets"]
        assert event.endpoints[0].url == f"http://{target}"
        # As Prometheus would: the target and path the group names, after real traffic.
        async with httpx.AsyncClient(base_url=f"http://{target}", timeout=30) as engine:
            body = {"model": "tiny", "prompt": "hi", "max_tokens": 2}
            assert (await engine.post("/v1/completions", json=body)).status_code == 200
            engine_families = await scrape(engine, group["labels"]["__metrics_path__"])
        controller_families = await scrape(h.client)
        assert (await h.client.delete("/v1/admin/models/tiny")).status_code == 204
        await h.endpoints_event("default/tiny", count=0)
        after_delete = await scrape(h.client)
    check_families(engine_families, ENGINE_FAMILIES)
    check_conventions(engine_families)
    assert (sample_value(engine_families, "flexinfer_engine_generated_tokens_total") or 0) >= 1
    assert sample_value(engine_families, "flexinfer_engine_sleep_level") == 0
    check_families(controller_families, CONTROLLER_FAMILIES)
    check_conventions(controller_families)
    scaled = "flexinfer_controller_scale_events_total"
    assert sample_value(controller_families, scaled, direction="up") == 1
    starts = "flexinfer_controller_engine_starts_total"
    assert sample_value(controller_families, starts, backend="reference") == 1
    assert sample_value(after_delete, scaled, direction="down") == 1
    assert sample_value(controller_families, "flexinfer_controller_models", phase="Ready") == 1


ENGINE_FAMILIES = {
    "flexinfer_engine_generated_tokens": set(),
    "flexinfer_engine_time_to_first_token_seconds": set(),
    "flexinfer_engine_kv_cache_usage_perc": set(),
    "flexinfer_engine_sleep_level": set(),
    "flexinfer_engine_num_requests_running": set(),
    "http_requests": {"handler", "method", "status"},
}
CONTROLLER_FAMILIES = {
    "flexinfer_controller_reconciles": {"result"},
    "flexinfer_controller_reconcile_duration_seconds": set(),
    "flexinfer_controller_models": {"phase"},
    "flexinfer_controller_scale_events": {"direction"},
    "flexinfer_controller_engine_starts": {"backend"},
    "flexinfer_controller_replicas": {"state"},
    "http_requests": {"handler", "method", "status"},
}
