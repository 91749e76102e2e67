"""FlashNodes: the nodes of a Model's node-tmpfs copies, kept in its ``flexinfer.ai/flash-nodes``
annotation on the fake apiserver (merged with what is there, bounded, read back)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from flexinfer_common.api import Model
from flexinfer_common.kube.client import KubeClient
from flexinfer_common.testing.kube_apiserver import KubeApiServer, find_crd_dir
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture
from flexinfer_controller.adapters.kube.objects import CustomObjects
from flexinfer_controller.adapters.kube.resources import MODELS
from flexinfer_controller.runtime.kubernetes.flashnodes import FlashNodes, merge, parse
from flexinfer_controller.runtime.kubernetes.harness import model_body
from flexinfer_controller.runtime.kubernetes.names import FLASH_NODES_ANNOTATION

apiserver = kube_apiserver_fixture([find_crd_dir(Path(__file__))])


@pytest.fixture
async def models(apiserver: KubeApiServer) -> AsyncIterator[CustomObjects]:
    """The Models of the fake apiserver, through the official client."""
    client = KubeClient(apiserver.url)
    try:
        yield CustomObjects(client, MODELS)
    finally:
        await client.close()


def annotation(api: KubeApiServer, name: str = "tiny") -> str | None:
    """The stored annotation of ``default/<name>``."""
    found = api.get("models", "default", name) or {}
    value = (found["metadata"].get("annotations") or {}).get(FLASH_NODES_ANNOTATION)
    return None if value is None else str(value)


def stored(api: KubeApiServer, name: str = "tiny") -> Model:
    """The stored Model, as the runtime reads it."""
    return Model.model_validate(api.get("models", "default", name))


def test_parse_keeps_node_names_in_order_and_skips_anything_else() -> None:
    value = "gpu-2, gpu-1,,gpu-2,bad\nname,../etc,UPPER,node.zone-a"
    assert parse(value) == ["gpu-2", "gpu-1", "node.zone-a"]
    assert parse(None) == []
    assert parse("x" * 254) == []  # longer than a node name can be


def test_merge_appends_new_nodes_and_drops_the_oldest_past_the_bound() -> None:
    assert merge(["b", "a"], {"c", "a"}) == ["b", "a", "c"]
    assert merge(["a", "b"], {"c", "d"}, limit=3) == ["b", "c", "d"]


async def test_a_seen_node_is_merged_into_what_the_annotation_holds(
    apiserver: KubeApiServer, models: CustomObjects
) -> None:
    body: dict[str, Any] = model_body()
    body["metadata"]["annotations"] = {FLASH_NODES_ANNOTATION: "gpu-0", "team": "a"}
    apiserver.create("models", body)
    nodes = FlashNodes(models)
    nodes.saw("default/tiny", "gpu-1")
    nodes.saw("default/tiny", "gpu-2")
    await nodes.flush("default/tiny")
    assert annotation(apiserver) == "gpu-0,gpu-1,gpu-2"
    assert (apiserver.get("models", "default", "tiny") or {})["metadata"]["annotations"][
        "team"
    ] == "a"

    # Known now: another pod event on the same node writes nothing.
    patches = apiserver.count("patch", "models")
    nodes.saw("default/tiny", "gpu-1")
    await nodes.flush("default/tiny")
    assert apiserver.count("patch", "models") == patches

    # A controller started afresh reads them back from the Model.
    assert FlashNodes(models).nodes(stored(apiserver)) == ["gpu-0", "gpu-1", "gpu-2"]


async def test_a_model_without_annotations_gets_them(
    apiserver: KubeApiServer, models: CustomObjects
) -> None:
    apiserver.create("models", model_body())
    nodes = FlashNodes(models)
    nodes.saw("default/tiny", "gpu-1")
    # Not written yet: a deletion now still finds the node.
    assert nodes.nodes(stored(apiserver)) == ["gpu-1"]
    await nodes.flush("default/tiny")
    assert annotation(apiserver) == "gpu-1"


async def test_a_write_that_lost_a_race_is_read_and_merged_again(
    apiserver: KubeApiServer, models: CustomObjects
) -> None:
    apiserver.create("models", model_body())

    def someone_else_writes() -> None:
        notes = {FLASH_NODES_ANNOTATION: "gpu-9"}
        apiserver.patch("models", "default", "tiny", {"metadata": {"annotations": notes}})

    # Between our read and our patch, another writer records its node.
    apiserver.after(someone_else_writes, verb="get", resource="models")
    nodes = FlashNodes(models)
    nodes.saw("default/tiny", "gpu-1")
    await nodes.flush("default/tiny")
    assert annotation(apiserver) == "gpu-9,gpu-1"


async def test_a_deleted_model_is_forgotten(
    apiserver: KubeApiServer, models: CustomObjects
) -> None:
    nodes = FlashNodes(models)
    nodes.saw("default/gone", "gpu-1")
    await nodes.flush("default/gone")  # no Model to write on: nothing left pending
    assert apiserver.count("patch", "models") == 0
    apiserver.create("models", model_body("gone"))
    assert nodes.nodes(stored(apiserver, "gone")) == []


async def test_nodes_an_other_writer_erased_are_written_again(
    apiserver: KubeApiServer, models: CustomObjects
) -> None:
    apiserver.create("models", model_body())
    nodes = FlashNodes(models)
    nodes.saw("default/tiny", "gpu-1")
    await nodes.flush("default/tiny")
    # A replace of the Model (kubectl replace, the admin API) without the annotation:
    apiserver.edit("models", "default", "tiny", lambda m: m["metadata"].pop("annotations"))
    nodes.check(stored(apiserver))  # what the next reconcile sees
    await nodes.flush("default/tiny")
    assert annotation(apiserver) == "gpu-1"

    patches = apiserver.count("patch", "models")
    nodes.check(stored(apiserver))  # all there: nothing to write
    await nodes.flush("default/tiny")
    assert apiserver.count("patch", "models") == patches
