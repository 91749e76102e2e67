"""Admin REST API for ModelCatalogs (catalog.service): CRUD in JSON and YAML, and rejections."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from flexinfer_controller.testing import Harness, error_of, run_controller

YAML_DOC = """
apiVersion: ai.flexinfer/v1alpha2
kind: ModelCatalog
metadata:
  name: team-models
spec:
  registries:
    - type: Ollama
  syncInterval: 6h
  filter: {tags: [instruct], namePattern: "*-instruct*"}
status:
  totalModels: 99
"""


@pytest.fixture
async def h(tmp_path: Path) -> AsyncIterator[Harness]:
    async with run_controller(tmp_path, max_body_bytes=4096) as harness:
        yield harness


def catalog_doc(name: str = "team", **spec: Any) -> dict[str, Any]:
    """A ModelCatalog of one Ollama registry (nothing to reach: it is reported, not listed)."""
    body: dict[str, Any] = {"registries": [{"type": "Ollama"}]}
    body.update(spec)
    return {
        "apiVersion": "ai.flexinfer/v1alpha2",
        "kind": "ModelCatalog",
        "metadata": {"name": name},
        "spec": body,
    }


async def test_crud_in_json(h: Harness) -> None:
    created = await h.client.post("/v1/admin/modelcatalogs", json=catalog_doc())
    assert created.status_code == 201, created.text
    body = created.json()
    assert (body["kind"], body["metadata"]["generation"]) == ("ModelCatalog", 1)
    assert body["spec"]["syncInterval"] == "1h0m0s"  # the default, as Go prints it
    again = await h.client.post("/v1/admin/modelcatalogs", json=catalog_doc())
    assert again.status_code == 409
    listed = (await h.client.get("/v1/admin/modelcatalogs")).json()
    assert (listed["kind"], [i["metadata"]["name"] for i in listed["items"]]) == (
        "ModelCatalogList", ["team"],
    )  # fmt: skip
    replaced = await h.client.put("/v1/admin/modelcatalogs/team", json=catalog_doc(
        syncInterval="10m"))  # fmt: skip
    assert replaced.status_code == 200
    assert replaced.json()["metadata"]["generation"] == 2
    got = await h.client.get("/v1/admin/modelcatalogs/team")
    assert got.json()["spec"]["syncInterval"] == "10m0s"
    assert (await h.client.delete("/v1/admin/modelcatalogs/team")).status_code == 204
    assert (await h.client.get("/v1/admin/modelcatalogs/team")).status_code == 404
    assert (await h.client.delete("/v1/admin/modelcatalogs/team")).status_code == 404


async def test_yaml_apply_ignores_the_clients_status(h: Harness) -> None:
    response = await h.client.put(
        "/v1/admin/modelcatalogs/team-models",
        content=YAML_DOC,
        headers={"content-type": "application/yaml"},
    )
    assert response.status_code == 201, response.text
    stored = await h.store.get_catalog("default", "team-models")
    assert stored.spec.sync_interval.total_seconds() == 6 * 3600
    assert stored.status.total_models != 99


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"registries": []}, "registries"),
        ({"registries": [{"type": "OCI"}]}, "url"),
        ({"registries": [{"type": "Docker", "url": "oci://r"}]}, "type"),
        ({"syncInterval": "often"}, "syncInterval"),
    ],
)
async def test_invalid_specs_are_422_naming_the_field(
    h: Harness, spec: dict[str, Any], field: str
) -> None:
    response = await h.client.post("/v1/admin/modelcatalogs", json=catalog_doc(**spec))
    assert response.status_code == 422, response.text
    assert field in str(error_of(response.text))


async def test_a_wrong_kind_is_400(h: Harness) -> None:
    doc = {**catalog_doc(), "kind": "Model"}
    response = await h.client.post("/v1/admin/modelcatalogs", json=doc)
    assert response.status_code == 400
    assert "ModelCatalog" in str(error_of(response.text)["message"])
