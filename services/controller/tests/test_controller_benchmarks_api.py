"""The admin API of placement (api/benchmarks.py): the benchmark table and the fleet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flexinfer_common.placement import benchmark_key, device_class
from flexinfer_controller.core.gpu import declared_labels
from flexinfer_controller.testing import run_controller

GPUS = [
    {"vendor": "nvidia", "count": 2, "arch": "sm_89", "vram": "24Gi", "node": "box"},
    {"vendor": "nvidia", "count": 1, "arch": "sm_90", "vram": "80Gi", "node": "box"},
]


async def test_a_result_is_stored_under_the_key_the_tps_lookup_reads(tmp_path: Path) -> None:
    async with run_controller(tmp_path) as h:
        body: dict[str, Any] = {
            "backend": "llama.cpp",  # an alias: stored as the canonical llamacpp
            "model": "qwen",
            "deviceClass": "vendor=NVIDIA,arch=sm_89,vram=24Gi,count=1,int4=",
            "tokensPerSecond": 41.5,
            "measuredAt": "2026-01-02T03:04:05Z",
        }
        put = await h.client.put("/v1/admin/benchmarks", params={"namespace": "ml"}, json=body)
        assert put.status_code == 200, put.text
        key = benchmark_key("llamacpp", "qwen", body["deviceClass"])
        assert put.json() == {**body, "backend": "llamacpp", "key": key}
        [stored] = await h.store.list_benchmarks("ml")
        assert (stored.key, stored.tokens_per_second) == (key, 41.5)
        listed = await h.client.get("/v1/admin/benchmarks", params={"namespace": "ml"})
        assert [item["key"] for item in listed.json()["items"]] == [key]
        assert (await h.client.get("/v1/admin/benchmarks")).json() == {"items": []}


async def test_what_is_not_a_measurement_is_refused(tmp_path: Path) -> None:
    good: dict[str, Any] = {
        "backend": "vllm",
        "model": "m",
        "deviceClass": "",
        "tokensPerSecond": 1.0,
    }
    bad: list[dict[str, Any]] = [
        {"tokensPerSecond": "12"},
        {"tokensPerSecond": True},
        {"tokensPerSecond": -1},
        {"measuredAt": 0},
        {"measuredAt": "2026-01-02T03:04:05"},  # no offset
        {"deviceClass": "a\nb"},
        {"model": "Not_A_Name"},
        {"key": "bench_0"},  # the server sets it
    ]
    async with run_controller(tmp_path) as h:
        for change in bad:
            answer = await h.client.put("/v1/admin/benchmarks", json={**good, **change})
            assert answer.status_code == 400, (change, answer.text)
            assert answer.json()["error"]["code"] == "invalid_request"
        assert await h.store.list_benchmarks("default") == []


async def test_the_nodes_placement_sees(tmp_path: Path) -> None:
    async with run_controller(tmp_path, gpus=GPUS) as h:
        nodes = (await h.client.get("/v1/admin/nodes")).json()["items"]
    assert nodes == [
        {
            "node": "box",
            "vendor": "nvidia",
            "count": 2,
            "devices": [0, 1],
            "arch": "sm_89",
            "vramMB": 24576,
            "deviceClass": device_class(declared_labels("nvidia", 2, "sm_89", "24Gi")),
        },
        {
            "node": "box",
            "vendor": "nvidia",
            "count": 1,
            "devices": [2],
            "arch": "sm_90",
            "vramMB": 81920,
            "deviceClass": device_class(declared_labels("nvidia", 1, "sm_90", "80Gi")),
        },
    ]
