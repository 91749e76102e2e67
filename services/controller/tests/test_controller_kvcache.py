"""The KV-cache pressure check: readings, watermarks, and through the controller."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from flexinfer_common.api import Model
from flexinfer_common.api.status import KVCacheStatus
from flexinfer_controller.adapters.metrics.http import usage_from_text
from flexinfer_controller.core.controller import Controller
from flexinfer_controller.core.kvcache import assess
from flexinfer_controller.testing import fake_model_dir, kill_engines, model_doc, run_controller

NOW = datetime(2026, 12, 2, tzinfo=UTC)
VLLM_PAGE = """\
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="qwen"} 0.42
# HELP vllm:num_requests_running Number of requests running.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="qwen"} 3.0
"""


def model(kv: dict[str, Any] | None = None) -> Model:
    doc = model_doc("tiny", "file:///m")
    if kv is not None:
        doc["spec"]["kvCache"] = kv
    return Model.model_validate(doc)


def test_readings_from_vllm_and_our_engine() -> None:
    assert usage_from_text(VLLM_PAGE) == 0.42
    ours = "# TYPE flexinfer_engine_kv_cache_usage_perc gauge\n"
    assert usage_from_text(ours + "flexinfer_engine_kv_cache_usage_perc 0.1\n") == 0.1
    v1 = 'vllm:kv_cache_usage_perc{engine="0"} 0.2\nvllm:kv_cache_usage_perc{engine="1"} 0.7\n'
    assert usage_from_text(v1) == 0.7  # the fullest engine counts


@pytest.mark.parametrize(
    "text", ["", "not prometheus {", "vllm:gpu_cache_usage_perc 7.5\n", "other_metric 0.9\n"]
)
def test_no_reading(text: str) -> None:
    assert usage_from_text(text) is None


def test_pressure_starts_at_the_high_and_ends_below_the_low_watermark() -> None:
    m = model()
    calm = assess(m, 0.5, None, NOW)
    assert (calm.utilization, calm.pressure, calm.last_pressure_time) == ("0.50", False, None)
    hot = assess(m, 0.9, calm, NOW)
    assert (hot.pressure, hot.last_pressure_time, hot.last_action) == (True, NOW, "Observe")
    still = assess(m, 0.7, hot, datetime(2027, 1, 1, tzinfo=UTC))
    assert still.pressure is True
    assert still.last_pressure_time == NOW  # the episode began then
    over = assess(m, 0.59, still, NOW)
    assert over.pressure is False
    assert over.utilization == "0.59"


def test_watermarks_and_policy_from_the_spec() -> None:
    m = model({"pressurePolicy": "Evict", "highWatermark": "0.5", "lowWatermark": 40})
    hot = assess(m, 0.55, KVCacheStatus(), NOW)
    assert hot.pressure is True
    assert hot.last_action == "Observe (Evict is not supported)"
    assert assess(m, 0.45, hot, NOW).pressure is True  # 40 read as 40 %
    assert assess(m, 0.39, hot, NOW).pressure is False


async def test_the_controller_reads_its_engines_into_status(tmp_path: Path) -> None:
    source = fake_model_dir(tmp_path / "m")
    page = source / "metrics.txt"
    page.write_text(VLLM_PAGE.replace("0.42", "0.91"))
    try:
        async with run_controller(tmp_path) as h:
            await h.put_model(model_doc("tiny", source.as_uri(), minReplicas=1))
            ready = await h.wait_phase("tiny", "Ready")
            controller: Controller = h.app.state.controller
            await controller.sync("default/tiny")  # one reconcile that saw the ready replica
            kv = (await h.store.get_model("default", "tiny")).status.kv_cache
            assert kv is not None
            assert (kv.utilization, kv.pressure, kv.last_action) == ("0.91", True, "Observe")
            assert ready.status.endpoint is not None

            page.write_text(VLLM_PAGE.replace("0.42", "0.30"))
            await controller.sync("default/tiny")
            calm = (await h.store.get_model("default", "tiny")).status.kv_cache
            assert calm is not None
            assert (calm.utilization, calm.pressure) == ("0.30", False)
            assert calm.last_pressure_time == kv.last_pressure_time

            page.write_text("garbage {")  # a page without a reading keeps the last one
            await controller.sync("default/tiny")
            kept = (await h.store.get_model("default", "tiny")).status.kv_cache
            assert kept == calm
    finally:
        assert kill_engines(tmp_path) == []
