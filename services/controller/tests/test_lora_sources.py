"""Adapter sources: LocalPath checks, the registry URIs of HuggingFace and OCI sources, and a
HuggingFace adapter fetched through the in-process registry (phase Caching, then Loaded)
from a Hub fixture server, into a vLLM stand-in run by the local controller."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from flexinfer_common.api import LoRAAdapter, LoRASourceType, Model
from flexinfer_common.serving import serve_in_background
from flexinfer_controller.adapters.registry.settings import RegistryClientSettings
from flexinfer_controller.core.cache import CacheStatus
from flexinfer_controller.core.lora.roots import AdapterRoots
from flexinfer_controller.core.lora.sources import (
    NoAdapterCache,
    local_path,
    registry_source,
    resolve,
)
from flexinfer_controller.testing import (
    eventually,
    fake_model_dir,
    kill_engines,
    model_doc,
    run_controller,
)
from flexinfer_registry.adapters.providers import builtin_providers
from flexinfer_registry.app import create_app as registry_app
from flexinfer_registry.core.providers.base import ProviderConfig
from flexinfer_registry.settings import RegistrySettings
from flexinfer_registry.testing.provider_fixtures import (
    FixtureState,
    Hold,
    ProviderFixture,
    provider_fixture,
)
from flexinfer_testing.backend_servers import install_standins

GPU = {"vendor": "nvidia", "count": 1, "arch": "sm_89", "vram": "24Gi"}
WEIGHTS = b"w" * 200_000
MODELS = AdapterRoots.of([], ["/models"])


def adapter(source_type: str, uri: str) -> LoRAAdapter:
    return LoRAAdapter.model_validate(
        {
            "metadata": {"name": "a", "namespace": "default", "generation": 1},
            "spec": {
                "modelRef": "m",
                "adapterName": "a",
                "source": {"type": source_type, "uri": uri},
            },
        }
    )


@pytest.mark.parametrize(
    ("uri", "mentions"),
    [
        ("adapters/sql", "absolute"),
        ("/models/../etc/sql", "'..'"),
        ("/models/sql\x1b", "control characters"),
    ],
)
def test_local_paths_the_engine_cannot_be_given_fail(uri: str, mentions: str) -> None:
    state = local_path(uri, MODELS)
    assert (state.status, state.reason) == (CacheStatus.FAILED, "InvalidSource")
    assert mentions in state.message


def test_a_local_path_is_the_engines_path_as_given() -> None:
    state = local_path("/models/adapters//sql/", MODELS)
    assert (state.status, state.reason, str(state.path)) == (
        CacheStatus.READY, "LocalPath", "/models/adapters/sql",
    )  # fmt: skip


def test_without_roots_every_local_path_is_denied_naming_the_setting() -> None:
    state = local_path("/home/me/adapters/sql", AdapterRoots())
    assert (state.status, state.reason) == (CacheStatus.FAILED, "PathNotAllowed")
    assert "FLEXINFER_CONTROLLER_LORA_ROOTS" in state.message
    assert "denied by default" in state.message


def test_a_local_path_outside_every_root_is_denied_listing_them() -> None:
    roots = AdapterRoots.of(["/srv/adapters"], ["/var/cache/lora-adapters"])
    assert local_path("/srv/adapters/sql", roots).status is CacheStatus.READY
    assert local_path("/var/cache/lora-adapters/default_a", roots).status is CacheStatus.READY
    for outside in ("/srv/adapters-other/sql", "/srv", "/etc/sql"):
        state = local_path(outside, roots)
        assert (state.status, state.reason) == (CacheStatus.FAILED, "PathNotAllowed"), outside
        assert "/srv/adapters, /var/cache/lora-adapters" in state.message
        assert "FLEXINFER_CONTROLLER_LORA_ROOTS" in state.message


def test_locally_a_link_out_of_a_root_is_outside_it(tmp_path: Path) -> None:
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    (elsewhere / "sql").mkdir(parents=True)
    root.mkdir()
    (root / "sql").symlink_to(elsewhere / "sql")
    (root / "real").mkdir()
    local = AdapterRoots.of([root], [], follow_links=True)
    assert local_path(str(root / "real"), local).status is CacheStatus.READY
    assert local_path(str(root / "sql"), local).reason == "PathNotAllowed"
    # Where the controller cannot see the engine's filesystem, the path is taken as written.
    assert local_path(str(root / "sql"), AdapterRoots.of([root], [])).status is CacheStatus.READY


@pytest.mark.parametrize(
    ("source_type", "uri", "expected"),
    [
        (LoRASourceType.HUGGING_FACE, "org/sql-lora", "hf://org/sql-lora"),
        (LoRASourceType.HUGGING_FACE, "HF://org/sql-lora", "hf://org/sql-lora"),
        (LoRASourceType.OCI, "registry.lan/loras/sql:v1", "oci://registry.lan/loras/sql:v1"),
        (LoRASourceType.OCI, "oci://registry.lan/sql:v1", "oci://registry.lan/sql:v1"),
        (LoRASourceType.HUGGING_FACE, "s3://bucket/sql", None),
        (LoRASourceType.HUGGING_FACE, "org/../x", None),
        (LoRASourceType.OCI, "/abs/path", None),
    ],
)
def test_registry_uris(source_type: LoRASourceType, uri: str, expected: str | None) -> None:
    assert registry_source(source_type, uri) == expected


def test_a_remote_source_without_a_registry_waits_naming_the_setting() -> None:
    base = Model.model_validate(
        {"metadata": {"name": "m", "namespace": "default"},
         "spec": {"backend": "vllm", "source": "hf://org/m"}}
    )  # fmt: skip
    state = resolve(adapter("HuggingFace", "org/sql-lora"), NoAdapterCache(), MODELS, base)
    assert (state.status, state.reason) == (CacheStatus.PENDING, "RegistryNotConfigured")
    assert "FLEXINFER_CONTROLLER_REGISTRY_ADDRESS" in state.message
    bad = resolve(adapter("OCI", "s3://x/y"), NoAdapterCache(), MODELS, base)
    assert (bad.status, bad.reason) == (CacheStatus.FAILED, "InvalidSource")


@pytest.fixture
def hub() -> Iterator[ProviderFixture]:
    """A Hub serving org/sql-lora (a PEFT adapter), its weights held until released."""
    state = FixtureState(hold=Hold(after=50_000))
    files = {
        "adapter_config.json": json.dumps({"r": 8}).encode(),
        "adapter_model.safetensors": WEIGHTS,
    }
    state.add_hf("org/sql-lora", "b" * 40, files)
    with provider_fixture(state) as fixture:
        yield fixture


@asynccontextmanager
async def registry(tmp_path: Path, hub: ProviderFixture) -> AsyncIterator[str]:
    """The registry in-process, fetching from ``hub``; its gRPC address."""
    settings = RegistrySettings(
        port=0, grpc_port=0, cache_dir=tmp_path / "registry", download_heartbeat_s=0.05
    )
    providers = builtin_providers(ProviderConfig(env=hub.env(), timeout_s=5.0, chunk_size=16_384))
    app: Any = registry_app(settings, providers=providers)
    async with serve_in_background(app):
        yield str(app.state.grpc_address)


async def test_a_hugging_face_adapter_is_cached_through_the_registry_then_loaded(
    tmp_path: Path, hub: ProviderFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    standins = install_standins(tmp_path / "standins")
    monkeypatch.setenv("PATH", f"{standins.bin_dir}{os.pathsep}{os.environ['PATH']}")
    client = RegistryClientSettings(retry_initial_s=0.05, retry_max_s=0.2)
    try:
        async with (
            registry(tmp_path, hub) as address,
            run_controller(
                tmp_path, gpus=[GPU], registry=client.model_copy(update={"address": address})
            ) as h,
        ):
            base = model_doc("base", fake_model_dir(tmp_path / "m").as_uri(), backend="vllm")
            base["spec"].update(config={"enableLora": True}, gpu={"vendor": "auto"})
            base["spec"]["serverless"]["minReplicas"] = 1
            await h.put_model(base)
            ready = await h.wait_phase("base", "Ready", timeout_s=30)
            doc = {
                "apiVersion": "ai.flexinfer/v1alpha2", "kind": "LoRAAdapter",
                "metadata": {"name": "sql"},
                "spec": {"modelRef": "base", "adapterName": "sql-lora", "preload": True,
                         "source": {"type": "HuggingFace", "uri": "org/sql-lora"}},
            }  # fmt: skip
            created = await h.client.post("/v1/admin/loraadapters", json=doc)
            assert created.status_code == 201, created.text

            async def phase_is(phase: str) -> bool:
                found = await h.store.get_adapter("default", "sql")
                return found.status.phase.value == phase

            await eventually(lambda: phase_is("Caching"), timeout_s=20)
            caching = await h.store.get_adapter("default", "sql")
            cached = {c.type: c for c in caching.status.conditions}["Cached"]
            assert cached.status == "False"
            assert "hf://org/sql-lora" in cached.message
            assert caching.metadata.finalizers == ["flexinfer.ai/lora-cleanup"]
            assert hub.state.hold is not None
            hub.state.hold.release.set()
            await eventually(lambda: phase_is("Loaded"), timeout_s=30)
            path = tmp_path / "data" / "models-cache" / "lora-adapters" / "default_sql"
            assert (path / "adapter_model.safetensors").read_bytes() == WEIGHTS
            assert ready.status.endpoint is not None
            async with httpx.AsyncClient(base_url=ready.status.endpoint, trust_env=False) as c:
                cards = (await c.get("/v1/models")).json()["data"]
            assert {x["id"]: x["root"] for x in cards if x["parent"]} == {"sql-lora": str(path)}

            # Deleted: unloaded, and its cached files go with it.
            assert (await h.client.delete("/v1/admin/loraadapters/sql")).status_code == 204
            await eventually(lambda: not path.exists(), timeout_s=15)
    finally:
        assert kill_engines(tmp_path) == [], "a test left engines running"
