"""The ModelCatalog reconcile on the local runtime: a real controller app, SQLite, and a real
OCI registry (catalog.testing) that the catalogs list. Tests wait on status, never on time."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from flexinfer_common.api import ModelCatalog
from flexinfer_common.testing.oci_push import ModelPusher, safetensors_bytes
from flexinfer_common.testing.oci_registry import TestRegistry, serve_registry
from flexinfer_controller.catalog.controller import CatalogController
from flexinfer_controller.catalog.reference import parse_registry_url
from flexinfer_controller.catalog.settings import CatalogSettings
from flexinfer_controller.testing import Harness, eventually, model_doc, run_controller

WEIGHTS = safetensors_bytes({"w": (8, 8)})
KEY = "default/team"


@pytest.fixture
async def registry() -> AsyncIterator[tuple[TestRegistry, str]]:
    """An open registry holding two chat models and an embedding model."""
    reg = TestRegistry()
    async with serve_registry(reg) as url:
        pusher = ModelPusher(url)
        for repo, tags in (("models/llama", "chat"), ("models/qwen", "chat"), ("emb/bge", "e")):
            await pusher.push_model(repo, "v1", {"w.safetensors": WEIGHTS},
                                    {"flexinfer.ai/tags": tags})  # fmt: skip
        yield reg, url


@pytest.fixture
async def h(tmp_path: Path) -> AsyncIterator[Harness]:
    settings = CatalogSettings(
        secrets_dir=tmp_path / "secrets", retry_initial_s=0.1, resync_interval_s=0.2, workers=2
    )
    async with run_controller(tmp_path, catalog=settings) as harness:
        yield harness


def catalog_doc(name: str = "team", *registries: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """A ModelCatalog document."""
    return {
        "apiVersion": "ai.flexinfer/v1alpha2",
        "kind": "ModelCatalog",
        "metadata": {"name": name},
        "spec": {"registries": list(registries), **spec},
    }


def catalogs(h: Harness) -> CatalogController:
    loop: CatalogController = h.app.state.catalogs
    return loop


async def put(h: Harness, doc: dict[str, Any]) -> dict[str, Any]:
    response = await h.client.put(f"/v1/admin/modelcatalogs/{doc['metadata']['name']}", json=doc)
    assert response.status_code in (200, 201), response.text
    body: dict[str, Any] = response.json()
    return body


async def synced(h: Harness, name: str = "team", generation: int = 1) -> ModelCatalog:
    """The catalog once a sync of ``generation`` wrote its status."""
    found: list[ModelCatalog] = []

    async def done() -> bool:
        found[:] = [await h.store.get_catalog("default", name)]
        cond = next((c for c in found[0].status.conditions if c.type == "Synced"), None)
        return cond is not None and cond.observed_generation == generation

    await eventually(done, timeout_s=20)
    return found[0]


def cond(catalog: ModelCatalog, kind: str) -> tuple[str, str, str]:
    c = next(c for c in catalog.status.conditions if c.type == kind)
    return c.status, c.reason, c.message


async def test_a_new_catalog_syncs_oci_and_reports_unsupported_types(
    h: Harness, registry: tuple[TestRegistry, str]
) -> None:
    _, url = registry
    oci = {"type": "OCI", "url": url}
    await put(h, catalog_doc("team", oci, {"type": "HuggingFace"}, {"type": "Ollama"},
                             filter={"tags": ["chat"]}))  # fmt: skip
    catalog = await synced(h)
    assert [e.name for e in catalog.status.entries] == ["models/llama:v1", "models/qwen:v1"]
    host = parse_registry_url(url).registry
    for entry in catalog.status.entries:
        assert entry.registry == url
        assert entry.reference.startswith(f"oci://{host}/{entry.name}@sha256:")
        assert entry.size == len(WEIGHTS) + 2  # the layer and the "{}" config
    assert catalog.status.total_models == 2
    assert catalog.status.last_sync_time is not None
    status, reason, message = cond(catalog, "Synced")
    assert (status, reason) == ("False", "RegistryTypeNotSupported")
    assert "2 models from 1 of 3 registries" in message
    assert "HuggingFace failed: RegistryTypeNotSupported" in message
    assert "Ollama failed: RegistryTypeNotSupported" in message
    assert cond(catalog, "Ready")[:2] == ("True", "PartiallySynced")


async def test_a_spec_change_and_the_interval_resync(
    h: Harness, registry: tuple[TestRegistry, str]
) -> None:
    _, url = registry
    await put(h, catalog_doc("team", {"type": "OCI", "url": url}, syncInterval="1s"))
    first = await synced(h)
    assert first.status.total_models == 3
    assert cond(first, "Synced")[:2] == ("True", "SyncSucceeded")
    # Pushed after the sync: found by the interval's resync, with no spec change.
    await ModelPusher(url).push_model("models/new", "v1", {"w": WEIGHTS}, {})

    async def listed() -> bool:
        found = await h.store.get_catalog("default", "team")
        return "models/new:v1" in [e.name for e in found.status.entries]

    await eventually(listed, timeout_s=20)
    doc = catalog_doc("team", {"type": "OCI", "url": url}, filter={"namePattern": "emb/*"})
    assert (await put(h, doc))["metadata"]["generation"] == 2
    second = await synced(h, generation=2)
    assert [e.name for e in second.status.entries] == ["emb/bge:v1"]


async def test_refused_credentials_fail_that_registry_only_and_are_not_retried_hot(
    h: Harness, registry: tuple[TestRegistry, str], tmp_path: Path
) -> None:
    _, url = registry
    locked = TestRegistry(auth="basic", users={"u": "right"})
    async with serve_registry(locked) as locked_url:
        await ModelPusher(locked_url, "u", "right").push_model("private/m", "v1", {"w": WEIGHTS})
        write_secret(tmp_path, "pull", locked_url, "u", "wrong")
        doc = catalog_doc("team", {"type": "OCI", "url": url},
                          {"type": "OCI", "url": locked_url, "secretRef": "pull"})  # fmt: skip
        await put(h, doc)
        catalog = await synced(h)
        assert catalog.status.total_models == 3
        status, reason, message = cond(catalog, "Synced")
        assert (status, reason) == ("False", "AuthenticationFailed")
        assert f"{locked_url} failed: AuthenticationFailed" in message
        assert url + " failed" not in message
        # Level-triggered checks of a permanent failure do not sync again before the interval.
        loop = catalogs(h)
        for _ in range(3):
            assert await loop.queue.wait_done(KEY, loop.enqueue(KEY), 10)
        assert loop.reconciler.syncs == 1
        # A fixed secret is read at the next sync (a spec change makes one now).
        write_secret(tmp_path, "pull", locked_url, "u", "right")
        await put(h, {**doc, "spec": {**doc["spec"], "syncInterval": "2h"}})
        fixed = await synced(h, generation=2)
    assert fixed.status.total_models == 4
    assert [e.name for e in fixed.status.entries if e.registry == locked_url] == ["private/m:v1"]
    assert cond(fixed, "Synced")[:2] == ("True", "SyncSucceeded")


async def test_a_missing_secret_is_named(h: Harness, registry: tuple[TestRegistry, str]) -> None:
    _, url = registry
    await put(h, catalog_doc("team", {"type": "OCI", "url": url, "secretRef": "absent"}))
    catalog = await synced(h)
    status, reason, message = cond(catalog, "Synced")
    assert (status, reason) == ("False", "SecretNotFound")
    assert "secret default/absent not found" in message
    assert cond(catalog, "Ready")[:2] == ("False", "NoRegistrySynced")


async def test_a_throttled_registry_is_retried_with_backoff(
    h: Harness, registry: tuple[TestRegistry, str]
) -> None:
    reg, url = registry
    reg.throttle(10_000, retry_after="0")
    await put(h, catalog_doc("team", {"type": "OCI", "url": url}))
    catalog = await synced(h)
    status, reason, message = cond(catalog, "Synced")
    assert (status, reason) == ("False", "RegistryUnavailable")
    assert f"{url} failed (retrying): RegistryUnavailable" in message
    loop = catalogs(h)
    await eventually(lambda: loop.reconciler.syncs >= 3, timeout_s=10)  # 0.1s, 0.2s, ...
    reg.recover()

    async def recovered() -> bool:
        found = await h.store.get_catalog("default", "team")
        return cond(found, "Synced")[1] == "SyncSucceeded"

    await eventually(recovered, timeout_s=20)
    assert (await h.store.get_catalog("default", "team")).status.total_models == 3


async def test_a_deleted_catalog_stops_syncing(
    h: Harness, registry: tuple[TestRegistry, str]
) -> None:
    reg, url = registry
    await put(h, catalog_doc("team", {"type": "OCI", "url": url}, syncInterval="1s"))
    await synced(h)
    response = await h.client.delete("/v1/admin/modelcatalogs/team")
    assert response.status_code == 204
    loop = catalogs(h)
    # The 1s timer fires, finds the catalog gone, and schedules nothing more.
    await eventually(lambda: loop.queue.idle(KEY), timeout_s=10)
    syncs, requests = loop.reconciler.syncs, len(reg.requests)
    assert await loop.queue.wait_done(KEY, loop.enqueue(KEY), 10)
    assert loop.queue.idle(KEY)
    assert (loop.reconciler.syncs, len(reg.requests)) == (syncs, requests)


async def test_a_slow_registry_blocks_neither_models_nor_more_than_the_workers(
    h: Harness, registry: tuple[TestRegistry, str]
) -> None:
    reg, url = registry
    reg.manifest_gate = gate = asyncio.Event()
    for name in ("a", "b", "c"):
        await put(h, catalog_doc(name, {"type": "OCI", "url": url}))
    loop = catalogs(h)
    await eventually(lambda: loop.reconciler.syncs == 2 and reg.in_flight > 0, timeout_s=20)
    # Both catalog workers wait on the registry; a Model still reconciles.
    doc = model_doc("ext", "file:///unused")
    doc["spec"]["endpoints"] = ["http://127.0.0.1:9/v1"]
    await h.put_model(doc)
    await h.wait_phase("ext", "Ready", timeout_s=20)
    assert loop.reconciler.syncs == 2  # the third catalog waits for a worker
    gate.set()
    for name in ("a", "b", "c"):
        assert (await synced(h, name)).status.total_models == 3


def write_secret(root: Path, name: str, registry_url: str, user: str, password: str) -> None:
    """A dockerconfigjson Secret as the local runtime reads it (a Secret volume's layout)."""
    host = parse_registry_url(registry_url).registry
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    folder = root / "secrets" / "default" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".dockerconfigjson").write_text(json.dumps({"auths": {host: {"auth": auth}}}))
