"""Helpers for the tests of FlexInfer's loader inside vLLM and SGLang: a tiny random Llama
checkpoint written with transformers, and one engine run per process (each engine owns
its GPU memory until its process exits)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

PROMPTS = [[1, 306, 4658, 278, 6593], [1, 450, 4996, 17354, 1701, 29916]]
"""Token ids: the tests run without a tokenizer (none can be downloaded)."""


def tiny_llama(out: Path) -> Path:
    """A 2-layer random Llama in bfloat16, saved as safetensors with its config."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    return out


def run_engine(
    script: str, args: list[str], log: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``script`` (a test's engine program) with ``args``, its output to ``log``; a
    program that holds on after answering stops when its stdin is closed."""
    with log.open("wb") as sink:
        return subprocess.Popen(
            [sys.executable, "-c", script, *args],
            stdin=subprocess.PIPE,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )


def read_tokens(path: Path) -> list[list[int]]:
    """The greedy token ids an engine program wrote."""
    tokens: list[list[int]] = json.loads(path.read_text())
    return tokens
