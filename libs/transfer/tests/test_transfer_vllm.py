"""FlexInfer's loader inside vLLM (``--load-format flexinfer``), with vLLM itself: a tiny
random Llama loads through the strategy chain and answers exactly as vLLM's own loader
makes it answer, and a second vLLM worker pulls its weights from a first one's memory.
vLLM needs its CUDA wheels and a GPU, so these run on a GPU machine."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "vllm", reason="vLLM is not installed here: it needs its CUDA wheels; runs on a GPU machine"
)

from flexinfer_testing.clients import wait_until
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
from vllm import LLM, SamplingParams
model, load_format, out, hold = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
llm = LLM(model=model, load_format=load_format, skip_tokenizer_init=True, enforce_eager=True,
          gpu_memory_utilization=0.3, max_model_len=256, seed=0)
params = SamplingParams(temperature=0.0, max_tokens=12, detokenize=False)
prompts = [{"prompt_token_ids": ids} for ids in json.loads(os.environ["PROMPTS"])]
outputs = llm.generate(prompts, params)
with open(out + ".tmp", "w") as f:
    json.dump([list(o.outputs[0].token_ids) for o in outputs], f)
os.replace(out + ".tmp", out)
if hold == "hold":  # a source serves its peers until its stdin closes
    sys.stdin.read()
"""

ENV = {
    "PROMPTS": str(PROMPTS),
    # The engine in this process, so the loader's log line lands in the test's log.
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
}


def _generate(model: Path, load_format: str, tmp: Path, env: dict[str, str] | None = None) -> str:
    out = tmp / f"{load_format}.json"
    log = tmp / f"{load_format}.log"
    proc = run_engine(ENGINE, [str(model), load_format, str(out), "-"], log, {**ENV, **(env or {})})
    returncode = proc.wait(timeout=600)
    assert returncode == 0, log.read_text()[-4000:]
    assert read_tokens(out)
    return log.read_text()


def test_flexinfer_load_format_answers_as_vllms_own_loader(tmp_path: Path) -> None:
    model = tiny_llama(tmp_path / "tiny-llama")
    ours = _generate(model, "flexinfer", tmp_path)
    _generate(model, "auto", tmp_path)
    assert "flexinfer loaded" in ours
    assert read_tokens(tmp_path / "flexinfer.json") == read_tokens(tmp_path / "auto.json")


@pytest.fixture
async def registry(tmp_path: Path) -> AsyncIterator[str]:
    """A real registry (its P2pService over gRPC) on the test's event loop."""
    from flexinfer_common.serving import serve_in_background
    from flexinfer_registry.app import create_app
    from flexinfer_registry.settings import RegistrySettings

    app: Any = create_app(RegistrySettings(port=0, grpc_port=0, cache_dir=tmp_path / "reg"))
    async with serve_in_background(app):
        yield str(app.state.grpc_address)


async def test_a_second_worker_pulls_its_weights_from_the_first(
    registry: str, tmp_path: Path
) -> None:
    pytest.importorskip("nixl", reason="nixl is not installed: peers are read over NIXL")
    # The registry serves on this event loop: everything that blocks runs in a thread.
    log = await asyncio.to_thread(_source_then_target, registry, tmp_path)
    assert " by rdma from " in log, log[-4000:]
    assert read_tokens(tmp_path / "flexinfer.json") == read_tokens(tmp_path / "source.json")


def _source_then_target(registry: str, tmp_path: Path) -> str:
    model = tiny_llama(tmp_path / "tiny-llama")
    source_env = {
        **ENV,
        "FLEXINFER_TRANSFER_SERVE_PEERS": "1",
        "FLEXINFER_TRANSFER_SOURCE_REGISTRY": registry,
    }
    source_out = tmp_path / "source.json"
    source = run_engine(
        ENGINE,
        [str(model), "flexinfer", str(source_out), "hold"],
        tmp_path / "source.log",
        source_env,
    )
    try:
        wait_until(source_out.exists, 600, "the source engine's answer")
        return _generate(model, "flexinfer", tmp_path, {"FLEXINFER_TRANSFER_REGISTRY": registry})
    finally:
        assert source.stdin is not None
        source.stdin.close()
        source.wait(timeout=120)
