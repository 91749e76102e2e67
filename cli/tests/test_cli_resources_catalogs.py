"""``flexinfer get|describe modelcatalogs`` against a real controller syncing a real registry."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from flexinfer_common.testing.oci_push import ModelPusher, safetensors_bytes
from flexinfer_common.testing.oci_registry import TestRegistry, serve_registry
from flexinfer_controller.testing import Harness, eventually, run_controller
from flexinfer_testing.cli import flexinfer


@pytest.fixture
async def h(tmp_path: Path) -> AsyncIterator[Harness]:
    async with run_controller(tmp_path) as harness:
        yield harness


async def test_apply_get_describe_a_catalog(h: Harness, tmp_path: Path) -> None:
    s = ("--server", h.url)
    async with serve_registry(TestRegistry()) as url:
        await ModelPusher(url).push_model("models/m", "v1", {"w": safetensors_bytes({"w": (2,)})})
        doc = {
            "apiVersion": "ai.flexinfer/v1alpha2",
            "kind": "ModelCatalog",
            "metadata": {"name": "team"},
            "spec": {"registries": [{"type": "OCI", "url": url}, {"type": "Ollama"}]},
        }
        manifest = tmp_path / "c.yaml"
        manifest.write_text(yaml.safe_dump(doc))
        applied = await flexinfer("apply", "-f", str(manifest), *s)
        assert applied.out == "modelcatalog.ai.flexinfer/team created\n", applied.report()

        async def synced() -> bool:
            return (await h.store.get_catalog("default", "team")).status.last_sync_time is not None

        await eventually(synced, timeout_s=20)
    table = await flexinfer("get", "mcat", *s)
    assert table.code == 0, table.report()
    header, row = table.out.splitlines()
    assert header.split() == ["NAME", "MODELS", "LASTSYNC"]  # the CRD's columns
    assert row.split()[:2] == ["team", "1"]
    described = await flexinfer("describe", "modelcatalog", "team", *s)
    assert "Conditions:" in described.out, described.report()
    assert "RegistryTypeNotSupported" in described.out
    gone = await flexinfer("delete", "modelcatalogs", "team", *s)
    assert gone.out == "modelcatalog.ai.flexinfer/team deleted\n", gone.report()
