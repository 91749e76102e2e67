"""FlexInfer's loader inside SGLang (a loader class given as ``load_format``), with SGLang
itself: a tiny random Llama loads through the strategy chain and answers exactly as
SGLang's own loader makes it answer. SGLang needs CUDA, so this runs on a GPU machine."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip(
    "sglang", reason="SGLang is not installed here: it needs its CUDA wheels; runs on a GPU machine"
)

from flexinfer_testing.engine_plugins import (
    PROMPTS,
    read_tokens,
    run_engine,
    tiny_llama,
)

pytestmark = pytest.mark.slow

ENGINE = """
import json, logging, os, sys
logging.basicConfig(level=logging.INFO)
import sglang
model, load_format, out = sys.argv[1], sys.argv[2], sys.argv[3]
if load_format == "flexinfer":
    from flexinfer_transfer.engines.sglang_loader import FlexInferSglangLoader
    load_format = FlexInferSglangLoader
if __name__ == "__main__":
    engine = sglang.Engine(model_path=model, load_format=load_format, skip_tokenizer_init=True,
                           mem_fraction_static=0.3, disable_cuda_graph=True, random_seed=0,
                           context_length=256)
    answers = engine.generate(input_ids=json.loads(os.environ["PROMPTS"]),
                              sampling_params={"temperature": 0.0, "max_new_tokens": 12})
    with open(out, "w") as f:
        json.dump([list(a["output_ids"]) for a in answers], f)
    engine.shutdown()
"""


def _generate(model: Path, load_format: str, tmp: Path) -> str:
    out = tmp / f"{load_format}.json"
    log = tmp / f"{load_format}.log"
    proc = run_engine(ENGINE, [str(model), load_format, str(out)], log, {"PROMPTS": str(PROMPTS)})
    returncode = proc.wait(timeout=600)
    assert returncode == 0, log.read_text()[-4000:]
    return log.read_text()


def test_flexinfer_loader_answers_as_sglangs_own_loader(tmp_path: Path) -> None:
    model = tiny_llama(tmp_path / "tiny-llama")
    ours = _generate(model, "flexinfer", tmp_path)
    _generate(model, "auto", tmp_path)
    assert "flexinfer loaded" in ours
    tokens = read_tokens(tmp_path / "flexinfer.json")
    assert tokens
    assert tokens == read_tokens(tmp_path / "auto.json")
