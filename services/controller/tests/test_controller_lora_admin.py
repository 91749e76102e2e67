"""Admin REST API for LoRAAdapters: CRUD in JSON and YAML, events, and every rejection."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from flexinfer_common.api import LoRAAdapter
from flexinfer_common.bus import topics
from flexinfer_controller.testing import Harness, error_of, eventually, run_controller

YAML_DOC = """
apiVersion: ai.flexinfer/v1alpha2
kind: LoRAAdapter
metadata:
  name: sql
  labels: {team: ml}
spec:
  modelRef: llama
  adapterName: sql-lora
  source: {type: HuggingFace, uri: org/sql-lora}
status:
  phase: Loaded
  loadedReplicas: 3
"""


@pytest.fixture
async def h(tmp_path: Path) -> AsyncIterator[Harness]:
    async with run_controller(tmp_path, max_body_bytes=4096) as harness:
        yield harness


def adapter_doc(name: str = "sql", **spec: Any) -> dict[str, Any]:
    """A LoRAAdapter document on the ``llama`` Model."""
    body: dict[str, Any] = {
        "modelRef": "llama",
        "adapterName": f"{name}-lora",
        "source": {"type": "HuggingFace", "uri": f"org/{name}-lora"},
    }
    body.update(spec)
    return {
        "apiVersion": "ai.flexinfer/v1alpha2",
        "kind": "LoRAAdapter",
        "metadata": {"name": name},
        "spec": body,
    }


async def wait_loaded_reason(h: Harness, name: str, reason: str) -> LoRAAdapter:
    """The adapter once its Loaded condition of the current generation has ``reason``."""
    found: list[LoRAAdapter] = []

    async def reached() -> bool:
        adapter = await h.store.get_adapter("default", name)
        found[:] = [adapter]
        return any(
            c.type == "Loaded"
            and c.reason == reason
            and c.observed_generation == adapter.metadata.generation
            for c in adapter.status.conditions
        )

    await eventually(reached, timeout_s=10)
    return found[0]


async def test_crud_json_and_events(h: Harness) -> None:
    probe = h.bus.consumer(topics.ADAPTERS, "admin-test", "t")
    doc = adapter_doc()
    created = await h.client.post("/v1/admin/loraadapters", json=doc)
    assert created.status_code == 201, created.text
    body = created.json()
    assert (body["kind"], body["metadata"]["namespace"]) == ("LoRAAdapter", "default")
    assert body["metadata"]["generation"] == 1
    # Not loaded yet: Pending, and the condition says into which Model's engines.
    assert body["status"]["phase"] == "Pending"
    (condition,) = body["status"]["conditions"]
    assert (condition["type"], condition["status"]) == ("Loaded", "False")
    assert "default/llama" in condition["message"]
    # The adapter loop's pass: the base Model does not exist, so it waits for one.
    seen = await wait_loaded_reason(h, "sql", "ModelNotFound")
    assert seen.status.phase == "Pending"
    assert seen.metadata.finalizers == []  # nothing was fetched or loaded: nothing to clean
    assert "null" not in created.text
    again = await h.client.post("/v1/admin/loraadapters", json=doc)
    assert again.status_code == 409
    assert error_of(again.text)["type"] == "conflict_error"

    listing = (await h.client.get("/v1/admin/loraadapters")).json()
    assert listing["kind"] == "LoRAAdapterList"
    assert [a["spec"]["adapterName"] for a in listing["items"]] == ["sql-lora"]
    got = (await h.client.get("/v1/admin/loraadapters/sql")).json()
    assert got["spec"]["source"] == {"type": "HuggingFace", "uri": "org/sql-lora"}

    doc["spec"]["maxRank"] = 16
    replaced = await h.client.put("/v1/admin/loraadapters/sql", json=doc)
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["metadata"]["generation"] == 2
    assert replaced.json()["status"]["phase"] == "Pending"
    stale = dict(doc, metadata={"name": "sql", "resourceVersion": "1"})
    assert (await h.client.put("/v1/admin/loraadapters/sql", json=stale)).status_code == 409

    assert (await h.client.delete("/v1/admin/loraadapters/sql")).status_code == 204
    assert (await h.client.get("/v1/admin/loraadapters/sql")).status_code == 404
    assert (await h.client.delete("/v1/admin/loraadapters/sql")).status_code == 404
    assert (await h.client.get("/v1/admin/models")).json()["items"] == []

    events = [topics.AdapterChangedEvent.model_validate(m.payload) for m in await probe.fetch()]
    assert [(e.adapter, e.model, e.generation, e.deleted) for e in events] == [
        ("default/sql", "default/llama", 1, False),
        ("default/sql", "default/llama", 2, False),
        ("default/sql", "default/llama", 0, True),
    ]


async def test_apply_yaml_ignores_status_and_namespaces(h: Harness) -> None:
    headers = {"Content-Type": "application/yaml"}
    url = "/v1/admin/loraadapters/sql?namespace=team-a"
    first = await h.client.put(url, content=YAML_DOC, headers=headers)
    assert first.status_code == 201, first.text
    body = first.json()
    assert body["metadata"]["namespace"] == "team-a"
    assert body["metadata"]["labels"] == {"team": "ml"}
    # status is the controller's: a client cannot claim the adapter is Loaded.
    assert (body["status"]["phase"], body["status"]["loadedReplicas"]) == ("Pending", 0)
    second = await h.client.put(url, content=YAML_DOC, headers=headers)
    assert second.status_code == 200
    assert second.json()["metadata"]["generation"] == 1
    assert (await h.client.get("/v1/admin/loraadapters/sql")).status_code == 404
    listing = (await h.client.get("/v1/admin/loraadapters?namespace=team-a")).json()
    assert [a["metadata"]["name"] for a in listing["items"]] == ["sql"]


@pytest.mark.parametrize(
    ("content", "content_type", "status", "mentions"),
    [
        (b"{not json", "application/json", 400, "malformed JSON"),
        (b"- a\n", "application/yaml", 400, "LoRAAdapter document must be a mapping"),
        (b"a: &x [1]\nb: *x\n", "application/yaml", 400, "aliases"),
        (b"", "application/json", 400, "send a LoRAAdapter document"),
        (b"{}", "text/plain", 415, "Content-Type"),
        (b"{" + b" " * 5000 + b"}", "application/json", 413, "exceeds"),
    ],
)
async def test_malformed_bodies(
    h: Harness, content: bytes, content_type: str, status: int, mentions: str
) -> None:
    response = await h.client.post(
        "/v1/admin/loraadapters", content=content, headers={"Content-Type": content_type}
    )
    assert response.status_code == status, response.text
    assert mentions in str(error_of(response.text)["message"])


@pytest.mark.parametrize(
    ("doc", "status", "mentions"),
    [
        (dict(adapter_doc(), kind="Model"), 400, "kind must be 'LoRAAdapter'"),
        (dict(adapter_doc(), apiVersion="ai.flexinfer/v1"), 400, "apiVersion"),
        (adapter_doc(adapterName="../x"), 422, "spec.adapterName"),
        (adapter_doc(adapterName="a b"), 422, "whitespace"),
        (adapter_doc(modelRef="Bad_Ref"), 422, "spec.modelRef"),
        (adapter_doc(source={"type": "S3", "uri": "x"}), 422, "spec.source.type"),
        (adapter_doc(image="x"), 422, "spec.image"),
    ],
)
async def test_invalid_documents(
    h: Harness, doc: dict[str, Any], status: int, mentions: str
) -> None:
    response = await h.client.post("/v1/admin/loraadapters", json=doc)
    assert response.status_code == status, response.text
    error = error_of(response.text)
    assert mentions in str(error["message"])
    if status == 422:
        assert str(error["message"]).startswith("invalid LoRAAdapter")


async def test_path_name_must_match_and_missing_version_conflicts(h: Harness) -> None:
    mismatch = await h.client.put("/v1/admin/loraadapters/other", json=adapter_doc())
    assert mismatch.status_code == 400
    assert "does not match" in str(error_of(mismatch.text)["message"])
    doc = adapter_doc()
    doc["metadata"]["resourceVersion"] = "7"
    response = await h.client.put("/v1/admin/loraadapters/sql", json=doc)
    assert response.status_code == 409
    assert "does not exist" in str(error_of(response.text)["message"])
