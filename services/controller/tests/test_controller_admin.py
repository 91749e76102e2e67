"""Admin REST API: CRUD in JSON and YAML, and every rejection."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from flexinfer_common.bus import topics
from flexinfer_controller.testing import Harness, error_of, eventually, model_doc, run_controller

YAML_DOC = """
apiVersion: ai.flexinfer/v1alpha2
kind: Model
metadata:
  name: yammy
  labels: {team: ml}
spec:
  backend: vllm
  source: HF://org/yammy
  serverless:
    idleTimeout: 5m
    minReplicas: 0
status:
  phase: Ready
"""


@pytest.fixture
async def h(tmp_path: Path) -> AsyncIterator[Harness]:
    async with run_controller(tmp_path, max_body_bytes=4096) as harness:
        yield harness


async def test_crud_json(h: Harness) -> None:
    probe = h.bus.consumer(topics.MODELS, "admin-test", "t")
    doc = model_doc("tiny", "HF://org/tiny")
    created = await h.client.post("/v1/admin/models", json=doc)
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["metadata"]["generation"] == 1
    assert body["metadata"]["namespace"] == "default"
    assert body["spec"]["serverless"]["idleTimeout"] == "5m0s"
    assert "null" not in created.text
    again = await h.client.post("/v1/admin/models", json=doc)
    assert again.status_code == 409
    assert error_of(again.text)["type"] == "conflict_error"

    got = await h.client.get("/v1/admin/models/tiny")
    assert got.json()["metadata"]["name"] == "tiny"
    listing = (await h.client.get("/v1/admin/models")).json()
    assert listing["kind"] == "ModelList"
    assert [m["metadata"]["name"] for m in listing["items"]] == ["tiny"]
    assert (await h.client.get("/v1/admin/models?namespace=other")).json()["items"] == []

    doc["spec"]["source"] = "HF://org/tiny-v2"
    replaced = await h.client.put("/v1/admin/models/tiny", json=doc)
    assert replaced.status_code == 200
    assert replaced.json()["metadata"]["generation"] == 2

    # Optimistic concurrency: a stale resourceVersion is refused.
    stale = dict(doc, metadata={"name": "tiny", "resourceVersion": "1"})
    assert (await h.client.put("/v1/admin/models/tiny", json=stale)).status_code == 409
    current = (await h.client.get("/v1/admin/models/tiny")).json()
    fresh = dict(
        doc, metadata={"name": "tiny", "resourceVersion": current["metadata"]["resourceVersion"]}
    )
    assert (await h.client.put("/v1/admin/models/tiny", json=fresh)).status_code == 200

    assert (await h.client.delete("/v1/admin/models/tiny")).status_code == 204
    assert (await h.client.get("/v1/admin/models/tiny")).status_code == 404
    assert (await h.client.delete("/v1/admin/models/tiny")).status_code == 404

    events = [topics.ModelChangedEvent.model_validate(m.payload) for m in await probe.fetch()]
    assert [(e.generation, e.deleted) for e in events] == [
        (1, False),
        (2, False),
        (2, False),
        (0, True),
    ]


async def test_apply_yaml_creates_then_updates(h: Harness) -> None:
    headers = {"Content-Type": "application/yaml"}
    first = await h.client.put("/v1/admin/models/yammy", content=YAML_DOC, headers=headers)
    assert first.status_code == 201, first.text
    assert first.json()["metadata"]["labels"] == {"team": "ml"}
    # status is ignored on write: the controller owns it.
    assert first.json()["status"]["phase"] != "Ready"
    second = await h.client.put(
        "/v1/admin/models/yammy", content=YAML_DOC, headers={"Content-Type": "text/yaml"}
    )
    assert second.status_code == 200
    assert second.json()["metadata"]["generation"] == 1  # same spec: no generation bump
    sniffed = await h.client.put("/v1/admin/models/yammy", content=YAML_DOC.encode())
    assert sniffed.status_code == 200
    model = await h.wait_phase("yammy", "Failed")
    assert model.metadata.labels == {"team": "ml"}


async def test_namespace_query(h: Harness) -> None:
    doc = model_doc("tiny", "HF://org/tiny")
    response = await h.client.post("/v1/admin/models?namespace=team-a", json=doc)
    assert response.json()["metadata"]["namespace"] == "team-a"
    assert (await h.client.get("/v1/admin/models/tiny")).status_code == 404
    assert (await h.client.get("/v1/admin/models/tiny?namespace=team-a")).status_code == 200
    doc["metadata"] = {"name": "tiny", "namespace": "team-b"}
    clash = await h.client.post("/v1/admin/models?namespace=team-a", json=doc)
    assert clash.status_code == 400
    assert "namespace" in str(error_of(clash.text)["message"])


BOMB = """
a: &a ["x","x","x","x","x","x","x","x","x"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: [*c,*c,*c,*c,*c,*c,*c,*c,*c]
"""


@pytest.mark.parametrize(
    ("content", "content_type", "status", "mentions"),
    [
        (b"{not json", "application/json", 400, "malformed JSON"),
        (b"a: [unclosed", "application/yaml", 400, "malformed YAML"),
        (b"- a\n- b\n", "application/yaml", 400, "must be a mapping"),
        (b"[1, 2]", "application/json", 400, "must be a mapping"),
        (b"just text", None, 400, "must be a mapping"),
        (BOMB.encode(), "application/yaml", 400, "aliases"),
        (b"[" * 2000 + b"]" * 2000, "application/json", 400, "malformed JSON"),
        (b"\xff\xfe", "application/json", 400, "UTF-8"),
        (b"", "application/json", 400, "empty"),
        (b"a: 1\n---\nb: 2\n", "application/yaml", 400, "malformed YAML"),
        (b"x" * 5000, "application/json", 413, "exceeds"),
        (b"{}", "text/plain", 415, "Content-Type"),
    ],
)
async def test_malformed_bodies(
    h: Harness, content: bytes, content_type: str | None, status: int, mentions: str
) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    response = await h.client.post("/v1/admin/models", content=content, headers=headers)
    assert response.status_code == status, response.text
    assert mentions in str(error_of(response.text)["message"])


async def test_chunked_body_over_limit_is_413(h: Harness) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(10):
            yield b" " * 1000

    response = await h.client.post(
        "/v1/admin/models", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 413


@pytest.mark.parametrize(
    ("patch", "status", "mentions"),
    [
        ({"apiVersion": "ai.flexinfer/v1alpha1"}, 400, "apiVersion"),
        ({"kind": "ModelDeployment"}, 400, "kind"),
        ({"metadata": {"name": "Bad_Name"}}, 422, "metadata.name"),
        ({"metadata": {"name": "other", "labels": {"path": "tiny"}}}, 400, "does not match"),
        ({"spec": {"backend": "vllm"}}, 422, "spec.source"),
        ({"spec": {"backend": "vllm", "source": "no-scheme"}}, 422, "spec.source"),
        ({"spec": {"backend": "vllm", "source": "HF://x", "serverless": {"minReplicas": -1}}},
         422, "spec.serverless.minReplicas"),
        ({"spec": {"backend": "vllm", "source": "HF://x", "serverless": {"idleTimeout": "soon"}}},
         422, "spec.serverless.idleTimeout"),
        ({"spec": {"backend": "vllm", "source": "HF://x", "bogus": 1}}, 422, "spec.bogus"),
        ({"metadata": "tiny"}, 422, "metadata"),
    ],
)  # fmt: skip
async def test_invalid_documents(
    h: Harness, patch: dict[str, object], status: int, mentions: str
) -> None:
    doc = {**model_doc("tiny", "HF://org/tiny"), **patch}
    meta = doc["metadata"]
    # PUT names the model twice (path and body); POST only in the body.
    mismatch = isinstance(meta, dict) and "path" in meta.get("labels", {})
    if mismatch:
        response = await h.client.put("/v1/admin/models/tiny", json=doc)
    else:
        response = await h.client.post("/v1/admin/models", json=doc)
    assert response.status_code == status, response.text
    error = error_of(response.text)
    assert mentions in str(error["message"])
    if status == 422:
        assert str(error["param"]).startswith(mentions.split(".")[0])


async def test_put_with_version_for_missing_model_conflicts(h: Harness) -> None:
    doc = model_doc("ghost", "HF://org/ghost")
    doc["metadata"] = {"name": "ghost", "resourceVersion": "7"}
    assert (await h.client.put("/v1/admin/models/ghost", json=doc)).status_code == 409


async def test_health_and_metrics(h: Harness) -> None:
    assert (await h.client.get("/healthz")).status_code == 200
    assert (await h.client.get("/readyz")).status_code == 200
    await h.client.post("/v1/admin/models", json=model_doc("tiny", "HF://org/tiny"))
    await h.wait_phase("tiny", "Pending")
    counted = 'flexinfer_controller_reconciles_total{result="ok"}'

    # The status is written inside the reconcile; the counter moves once it returns.
    async def reconcile_counted() -> bool:
        return counted in (await h.client.get("/metrics")).text

    await eventually(reconcile_counted)
    metrics = (await h.client.get("/metrics")).text
    assert "flexinfer_controller_replicas" in metrics
    assert (await h.client.get("/v1/admin/endpoints")).json() == {"items": []}
