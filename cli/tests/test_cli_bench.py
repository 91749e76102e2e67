"""``flexinfer bench tps`` against the real reference engine serving the generated tiny
model: through a local controller into its benchmark table, and into the global
ConfigMap of a (fake) apiserver, keyed as the placement core's TPS lookup reads them."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

from flexinfer_common.placement import BenchmarkResults, benchmark_key, device_class
from flexinfer_common.placement.tps import GLOBAL_RESULTS_CONFIGMAP
from flexinfer_common.testing.kube_apiserver import KubeApiServer, find_crd_dir
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture
from flexinfer_controller.core.gpu import declared_labels
from flexinfer_controller.testing import model_doc, run_controller
from flexinfer_testing.cli import flexinfer, write_kubeconfig
from flexinfer_testing.engines import reference_engine

apiserver = kube_apiserver_fixture([find_crd_dir(Path(__file__))])

RATE = re.compile(r": ([0-9.]+) tokens/s, median of 2 runs of 8 tokens at http://127\.0\.0\.1:\d+")
GPU = {"vendor": "nvidia", "arch": "sm_89", "vram": "24Gi", "node": "box"}


async def test_local_mode_stores_the_measurement_in_the_controllers_table(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    async with run_controller(
        tmp_path, engine_python=sys.executable, gpus=[GPU], engine_startup_timeout_s=120.0
    ) as h:
        doc = model_doc("tiny", tiny_model_dir.as_uri(), minReplicas=1)
        doc["spec"]["gpu"] = {"vendor": "nvidia"}
        await h.put_model(doc)
        await h.wait_phase("tiny", "Ready", timeout_s=120)
        ran = await flexinfer(
            "bench", "tps", "--model", "tiny", "--server", h.url,
            "--max-tokens", "8", "--runs", "2",
        )  # fmt: skip
        assert ran.code == 0, ran.report()
        found = RATE.search(ran.out)
        assert found is not None, ran.out
        [stored] = await h.store.list_benchmarks("default")
        # Keyed by the device class placement gives the GPU the Model was placed on.
        declared = device_class(declared_labels("nvidia", 1, "sm_89", "24Gi"))
        assert (stored.backend, stored.model, stored.device_class) == (
            "reference",
            "tiny",
            declared,
        )
        assert stored.tokens_per_second == float(found.group(1)) > 0
        assert stored.key in ran.out
        listing = await h.client.get("/v1/admin/benchmarks")
        assert listing.json()["items"][0]["tokensPerSecond"] == stored.tokens_per_second

        # A dry run measures again and stores nothing new.
        dry = await flexinfer(
            "bench", "tps", "--model", "tiny", "--server", h.url,
            "--max-tokens", "8", "--runs", "2", "--dry-run",
        )  # fmt: skip
        assert dry.code == 0, dry.report()
        assert "stored" not in dry.out
        assert await h.store.list_benchmarks("default") == [stored]


async def test_a_model_without_an_endpoint_or_gpu_is_a_one_line_error(tmp_path: Path) -> None:
    async with run_controller(tmp_path) as h:
        await h.put_model(model_doc("idle", "file:///nowhere/at/all"))
        missing = await flexinfer("bench", "tps", "--model", "nope", "--server", h.url)
        assert (missing.code, missing.err.count("\n")) == (1, 1), missing.report()
        assert "404" in missing.err
        no_gpu = await flexinfer("bench", "tps", "--model", "idle", "--server", h.url)
        assert no_gpu.code == 2, no_gpu.report()
        assert "pass --device-class" in no_gpu.err
        no_url = await flexinfer(
            "bench", "tps", "--model", "idle", "--server", h.url, "--device-class", "x"
        )
        assert no_url.code == 2, no_url.report()
        assert "has no ready endpoint" in no_url.err
        bad = await flexinfer("bench", "tps", "--model", "idle", "--runs", "0")
        assert (bad.code, bad.err.strip()) == (
            2,
            "flexinfer bench tps: --runs must be between 1 and 100",
        )


def _running_pod(name: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"flexinfer.ai/model": "tiny"}},
        "spec": {"nodeName": node, "containers": [{"name": "engine", "image": "engine"}]},
    }


@pytest.mark.usefixtures("apiserver")
async def test_kubernetes_mode_writes_the_global_configmap(
    apiserver: KubeApiServer, tmp_path: Path, tiny_model_dir: Path
) -> None:
    labels = {
        "flexinfer.ai/gpu.vendor": "NVIDIA",
        "flexinfer.ai/gpu.arch": "sm_89",
        "flexinfer.ai/gpu.vram": "22Gi",
        "flexinfer.ai/gpu.count": "1",
        "flexinfer.ai/gpu.int4": "true",
    }
    apiserver.create("nodes", {"metadata": {"name": "gpu-1", "labels": labels}})
    pod = apiserver.create("pods", _running_pod("tiny-abc", "gpu-1"))
    apiserver.set_status("pods", "default", pod["metadata"]["name"], {"phase": "Running"})
    kubeconfig = str(write_kubeconfig(tmp_path / "kubeconfig", apiserver.url))
    with reference_engine(tiny_model_dir, tmp_path / "engine.log") as engine:
        model = model_doc("tiny", "hf://org/tiny")
        apiserver.create("models", model)
        apiserver.patch(
            "models", "default", "tiny", {"status": {"endpoint": engine.url}}, subresource="status"
        )
        args = ("bench", "tps", "--model", "tiny", "--kubeconfig", kubeconfig,
                "--max-tokens", "8", "--runs", "2")  # fmt: skip
        first = await flexinfer(*args)
        assert first.code == 0, first.report()
        again = await flexinfer(*args)  # the ConfigMap exists now: patched in place
        assert again.code == 0, again.report()
    found = RATE.search(again.out)
    assert found is not None, again.out
    stored = apiserver.get("configmaps", "default", GLOBAL_RESULTS_CONFIGMAP)
    assert stored is not None
    key = benchmark_key("reference", "tiny", device_class(labels))
    assert list(stored["data"]) == [key]
    assert stored["data"][key] == f"{float(found.group(1)):.2f}"
    # What the scheduler's TPS lookup then finds for that node's device class.
    results = BenchmarkResults(stored["data"])
    assert results.tps("reference", "tiny", device_class(labels)) == float(found.group(1)) > 0
