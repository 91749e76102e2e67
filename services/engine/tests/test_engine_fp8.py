"""An FP8 checkpoint of the reference model (the controller's quantizer) loads and runs."""

from __future__ import annotations

from pathlib import Path
from threading import Event

import pytest
import torch

from flexinfer_common.errors import PermanentError
from flexinfer_controller.quantize.request import build_request
from flexinfer_controller.quantize.run import run
from flexinfer_engine.app import build_engine
from flexinfer_engine.core.engine import Finished, InferenceEngine
from flexinfer_engine.core.fp8 import dequantize
from flexinfer_engine.core.sampling import SamplingParams
from flexinfer_engine.core.weights import generate_model
from flexinfer_engine.settings import EngineSettings


def _engine(model_dir: Path) -> InferenceEngine:
    engine = build_engine(EngineSettings(model_dir=model_dir))
    engine.load()
    return engine


def test_an_fp8_checkpoint_runs_close_to_the_original(tmp_path: Path) -> None:
    source = generate_model(tmp_path / "tiny", name="fp8")
    run(build_request("FP8", str(source), str(tmp_path / "tiny-fp8"), {}))
    original, quantized = _engine(source), _engine(tmp_path / "tiny-fp8")
    weights = quantized.model.state_dict()
    assert all(t.dtype == torch.float32 for t in weights.values())
    reference = original.model.state_dict()
    fc = "layers.0.fc_in.weight"
    assert not torch.equal(weights[fc], reference[fc])  # the FP8 rounding is in there
    assert torch.allclose(weights[fc], reference[fc], rtol=2**-4, atol=1e-4)
    tokens = torch.tensor([[256, *b"the cat sat"]])
    with torch.no_grad():
        logits = original.model(tokens), quantized.model(tokens)
    assert torch.allclose(logits[0], logits[1], atol=0.15)
    events = list(quantized.generate([[256, *b"Once"]], SamplingParams(max_tokens=8), Event()))
    assert isinstance(events[-1], Finished)


def test_an_fp8_weight_without_its_scale_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PermanentError, match="no w_scale"):
        dequantize({"w": torch.zeros(2, 2).to(torch.float8_e4m3fn)}, torch.float32)
