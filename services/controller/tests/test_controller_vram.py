"""VRAM estimates from a Model's files (backends/reference_vram.py, core/vram.py): the
reference engine's weights plus KV cache, and two un-sized Models of one shared group that
fit side by side by those estimates running together on one declared GPU."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from flexinfer_common.api import Model
from flexinfer_common.bus import topics
from flexinfer_controller.backends.reference import ReferenceBackend
from flexinfer_controller.backends.reference_vram import MIB, reference_vram_mb
from flexinfer_controller.core.vram import VramEstimates
from flexinfer_controller.testing import demand, eventually, kill_engines, model_doc, run_controller

GPU = [{"vendor": "nvidia", "arch": "sm_89", "vram": "24Gi", "node": "n1"}]
SHARING = {"mode": "arbiter", "demand_window_s": 2.0, "swap_cooldown_s": 600.0}


def test_the_reference_estimate_is_its_weights_plus_the_kv_cache(tiny_model_dir: Path) -> None:
    config = json.loads((tiny_model_dir / "config.json").read_text())
    weights = sum(f.stat().st_size for f in tiny_model_dir.glob("*.safetensors"))
    width = {"float32": 4, "bfloat16": 2}[config["torch_dtype"]]
    kv = (
        2
        * config["num_hidden_layers"]
        * config["hidden_size"]
        * config["max_position_embeddings"]
        * width
    )
    assert weights > 0
    assert reference_vram_mb(tiny_model_dir) == -(-(weights + kv) // MIB)


@pytest.mark.parametrize(
    "config",
    [
        "not json",
        json.dumps([1, 2]),
        json.dumps({"num_hidden_layers": 4, "hidden_size": 128}),
        json.dumps(
            {
                "num_hidden_layers": 4,
                "hidden_size": -1,
                "max_position_embeddings": 512,
                "torch_dtype": "float32",
            }
        ),
        json.dumps(
            {
                "num_hidden_layers": 4,
                "hidden_size": 128,
                "max_position_embeddings": 512,
                "torch_dtype": "int3",
            }
        ),
    ],
)
def test_files_it_cannot_read_give_no_estimate(
    tmp_path: Path, tiny_model_dir: Path, config: str
) -> None:
    shutil.copytree(tiny_model_dir, tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text(config)
    assert reference_vram_mb(tmp_path / "m") is None
    assert reference_vram_mb(tmp_path / "missing") is None


def model(generation: int, gpu: dict[str, object] | None = None) -> Model:
    return Model.model_validate(
        {
            "apiVersion": "ai.flexinfer/v1alpha2",
            "kind": "Model",
            "metadata": {"name": "m", "namespace": "d", "generation": generation},
            "spec": {"backend": "reference", "source": "file:///m", "gpu": gpu or {}},
        }
    )


def test_an_estimate_fills_only_a_missing_size_of_its_own_generation(
    tiny_model_dir: Path,
) -> None:
    estimates, backend = VramEstimates(), ReferenceBackend()
    expected = reference_vram_mb(tiny_model_dir)
    estimates.learn(model(1), backend, tiny_model_dir)
    assert estimates.apply(model(1)).spec.gpu_or_default.vram_estimate_mb == expected
    assert model(1).spec.gpu_or_default.vram_estimate_mb is None  # the input is not changed
    assert estimates.apply(model(2)).spec.gpu_or_default.vram_estimate_mb is None
    declared = model(1, {"vramEstimateMB": 9000})
    assert estimates.apply(declared).spec.gpu_or_default.vram_estimate_mb == 9000
    estimates.learn(model(3, {"vendor": "cpu"}), backend, tiny_model_dir)
    assert estimates.apply(model(3)).spec.gpu_or_default.vram_estimate_mb is None
    estimates.forget("d/m")
    assert estimates.apply(model(1)).spec.gpu_or_default.vram_estimate_mb is None


@pytest.mark.slow
async def test_two_unsized_models_of_a_group_that_fit_by_their_estimates_run_together(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    source = tiny_model_dir.as_uri()
    overrides: dict[str, Any] = {
        "gpus": GPU,
        "gpu_sharing": SHARING,
        "engine_python": sys.executable,
    }
    try:
        async with run_controller(tmp_path, **overrides) as h:
            for name in ("a", "b"):
                doc = model_doc(name, source, idle_timeout="300s")
                doc["spec"]["gpu"] = {"vendor": "nvidia", "shared": "g"}
                await h.put_model(doc)
                await h.publish(topics.DEMAND, demand(f"default/{name}"))

            async def both_ready() -> bool:
                found = [await h.store.get_model("default", n) for n in ("a", "b")]
                return all(m.status.phase == "Ready" for m in found)

            await eventually(both_ready, timeout_s=120)
            runtime = h.app.state.controller.runtime
            assert sorted(r.model for r in runtime.list()) == ["default/a", "default/b"]
            arbiter = h.app.state.controller.shared_gpu
            assert sorted(arbiter.holders("g")) == ["default/a", "default/b"]
            assert list(arbiter.swaps) == []
    finally:
        assert kill_engines(tmp_path) == [], "a test left engines running"
