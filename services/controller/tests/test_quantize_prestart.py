"""spec.quantize in local mode: the quantizer runs before the engine, through the real
controller; a refusal fails the Model with the quantizer's message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psutil
import pytest

from flexinfer_common.api import Model, ModelSpec
from flexinfer_controller.core.prestart import PreStartRefusedError
from flexinfer_controller.quantize.output import MARKER
from flexinfer_controller.quantize.prestart import QuantizePreStart
from flexinfer_controller.runtime.local import runtime_id
from flexinfer_controller.testing import (
    eventually,
    kill_engines,
    marked_pids,
    model_doc,
    run_controller,
)
from flexinfer_testing.quantize_models import reference_model


def _doc(source: Path, quantize: dict[str, Any]) -> dict[str, Any]:
    doc = model_doc("tiny", source.as_uri(), minReplicas=1)
    doc["spec"]["quantize"] = quantize
    return doc


def _engine_model_dirs(tmp_path: Path) -> list[str]:
    dirs = []
    for pid in marked_pids(runtime_id(tmp_path / "data")):
        try:
            argv = psutil.Process(pid).cmdline()
        except psutil.Error:
            continue
        dirs.append(argv[argv.index("--model-dir") + 1])
    return dirs


async def test_the_engine_starts_from_the_converted_weights_which_go_with_the_model(
    tmp_path: Path,
) -> None:
    source = reference_model(tmp_path / "models" / "tiny")
    quantized = tmp_path / "data" / "quantized" / "default_tiny" / "fp8"
    try:
        async with run_controller(tmp_path) as h:
            doc = _doc(source, {"format": "FP8", "strategy": "tensor", "useGPU": False})
            assert (await h.client.put("/v1/admin/models/tiny", json=doc)).status_code == 201
            await h.wait_phase("tiny", "Ready", timeout_s=60)
            assert (quantized / MARKER).is_file()  # ready only once the conversion finished
            assert _engine_model_dirs(tmp_path) == [str(quantized)]
            assert b'"strategy": "tensor"' in (quantized / "config.json").read_bytes()
            assert (await h.client.delete("/v1/admin/models/tiny")).status_code == 204

            async def removed() -> bool:
                return not quantized.parent.exists()

            await eventually(removed)
    finally:
        assert kill_engines(tmp_path) == []


@pytest.mark.parametrize(
    ("quantize", "message"),
    [
        ({"format": "GGUF"}, "lm_head.bias is not zero"),
        ({"format": "AWQ", "image": "registry.lan/awq:1"}, "local mode runs only the built-in"),
        ({"format": "FP8", "bits": 4}, "FP8 has no option bits"),
    ],
)
async def test_a_refused_quantization_fails_the_model_with_its_message(
    tmp_path: Path, quantize: dict[str, Any], message: str
) -> None:
    source = reference_model(tmp_path / "models" / "tiny")
    try:
        async with run_controller(tmp_path) as h:
            assert (
                await h.client.put("/v1/admin/models/tiny", json=_doc(source, quantize))
            ).status_code == 201
            model = await h.wait_phase("tiny", "Failed", timeout_s=60)
            assert message in (model.status.message or "")
            assert "spec.quantize" in (model.status.message or "")
            assert _engine_model_dirs(tmp_path) == []
    finally:
        assert kill_engines(tmp_path) == []


async def test_without_spec_quantize_the_directory_is_unchanged(tmp_path: Path) -> None:
    step = QuantizePreStart(tmp_path / "quantized")
    spec = ModelSpec(backend="reference", source="file:///x")
    model = Model.model_validate({"metadata": {"name": "m"}, "spec": spec})
    assert await step.prepare(model, tmp_path / "x") == tmp_path / "x"
    bad = model.model_copy(
        update={"spec": model.spec.model_copy(update={"quantize": {"format": "GPTQ"}})}
    )
    with pytest.raises(PreStartRefusedError, match="GPTQ needs calibration"):
        await step.prepare(bad, tmp_path / "x")
    await step.release("default/m")  # nothing there: nothing to do
