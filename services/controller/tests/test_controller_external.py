"""External models (spec.endpoints) through the admin API: Ready, published, nothing run."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from flexinfer_common.bus import topics
from flexinfer_common.bus.memory import MemoryBus
from flexinfer_controller.testing import (
    Harness,
    engine_pids,
    eventually,
    fake_model_dir,
    kill_engines,
    model_doc,
    run_controller,
)

A, B, C = "http://10.0.0.1:8000", "https://llm.example.com/base", "http://10.0.0.3:9000"


@pytest.fixture(autouse=True)
def no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    assert kill_engines(tmp_path) == [], "a test left engines running"


def external_doc(name: str, endpoints: list[str], backend: str = "vllm") -> dict[str, Any]:
    """A Model whose backend and source would fail or wait if we had to run it."""
    doc = model_doc(name, "hf://org/not-downloaded", backend=backend)
    doc["spec"]["endpoints"] = endpoints
    return doc


async def status_of(h: Harness, name: str) -> dict[str, Any]:
    response = await h.client.get(f"/v1/admin/models/{name}")
    assert response.status_code == 200, response.text
    status: dict[str, Any] = response.json()["status"]
    return status


async def endpoint_urls(h: Harness, model: str) -> list[str]:
    response = await h.client.get("/v1/admin/endpoints", params={"model": model})
    return sorted(item["url"] for item in response.json()["items"])


async def test_external_model_is_ready_published_and_never_run(tmp_path: Path) -> None:
    bus = MemoryBus()
    progress = bus.consumer(topics.PROGRESS, "proxy-test", "p")
    try:
        async with run_controller(tmp_path, bus=bus) as h:
            await h.put_model(external_doc("ext", [A, B]))
            event = await h.endpoints_event("default/ext", count=2)
            assert [e.url for e in event.endpoints] == [A, B]
            assert event.phase == "Ready"
            model = await h.wait_phase("ext", "Ready")
            assert model.status.endpoint == A
            assert model.status.ready_replicas == 2

            status = await status_of(h, "ext")
            assert status["phase"] == "Ready"
            assert status["readyReplicas"] == 2
            assert status["endpoint"] == A
            ready = next(c for c in status["conditions"] if c["type"] == "Ready")
            assert ready["status"] == "True"
            assert ready["reason"] == "ExternalEndpoints"
            assert "external" in ready["message"]
            assert all(c["status"] != "False" for c in status["conditions"]), status
            assert await endpoint_urls(h, "default/ext") == sorted([A, B])

            # Demand for it starts nothing and reports no cold start.
            await h.publish(
                topics.DEMAND,
                topics.DemandEvent(
                    model="default/ext", queue_depth=3, since=datetime.now(UTC), proxy="t"
                ),
            )
            assert await h.app.state.controller.sync("default/ext")
            assert engine_pids(tmp_path) == []
            assert await progress.fetch(timeout_s=0.2) == []
            assert (await status_of(h, "ext"))["phase"] == "Ready"
    finally:
        await bus.close()


async def test_changing_and_deleting_endpoints(tmp_path: Path) -> None:
    async with run_controller(tmp_path) as h:
        await h.put_model(external_doc("ext", [A, B], backend="no-such-backend"))
        first = await h.endpoints_event("default/ext", count=2)

        await h.put_model(external_doc("ext", [C], backend="no-such-backend"))
        changed = await h.endpoints_event("default/ext", count=1)
        assert [e.url for e in changed.endpoints] == [C]
        assert changed.revision > first.revision

        async def updated() -> bool:
            status = await status_of(h, "ext")
            return bool(status["readyReplicas"] == 1 and status["endpoint"] == C)

        await eventually(updated)
        assert await endpoint_urls(h, "default/ext") == [C]

        response = await h.client.delete("/v1/admin/models/ext")
        assert response.status_code == 204
        gone = await h.endpoints_event("default/ext", count=0)
        assert gone.revision > changed.revision
        assert await endpoint_urls(h, "default/ext") == []


async def test_switching_between_engine_and_external(tmp_path: Path) -> None:
    source = fake_model_dir(tmp_path / "m").as_uri()
    async with run_controller(tmp_path) as h:
        # Runs an engine first (serverless off: one replica without demand).
        engine_doc = model_doc("sw", source, enabled=False)
        await h.put_model(engine_doc)
        served = await h.endpoints_event("default/sw", count=1)
        assert served.endpoints[0].url != A
        assert len(engine_pids(tmp_path)) == 1

        # Now served elsewhere: the engine is stopped and the external URL published.
        external = dict(engine_doc, spec={**engine_doc["spec"], "endpoints": [A]})
        await h.put_model(external)
        event = await h.endpoints_event("default/sw", count=1)
        assert [e.url for e in event.endpoints] == [A]
        await eventually(lambda: engine_pids(tmp_path) == [], timeout_s=10)
        assert (await status_of(h, "sw"))["endpoint"] == A

        # And back: the external URL is withdrawn and an engine serves again.
        await h.put_model(engine_doc)
        back = await h.endpoints_event("default/sw", count=1)
        assert back.endpoints[0].url != A
        await h.wait_phase("sw", "Ready")
        assert await endpoint_urls(h, "default/sw") == [back.endpoints[0].url]
        response = await h.client.delete("/v1/admin/models/sw")
        assert response.status_code == 204
        await eventually(lambda: engine_pids(tmp_path) == [], timeout_s=10)


async def test_bad_endpoints_are_rejected(tmp_path: Path) -> None:
    async with run_controller(tmp_path) as h:
        for bad in (["ftp://x"], ["http://a b"], ["not a url"], [A] * 33):
            doc = external_doc("bad", bad)
            response = await h.client.put("/v1/admin/models/bad", json=doc)
            assert response.status_code == 422, (bad, response.text)
            assert response.json()["error"]["param"].startswith("spec.endpoints")
