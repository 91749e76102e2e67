"""Core engine: deterministic weights, KV cache, tokenizer, stops, sampling parameters."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Generator
from pathlib import Path

import pytest
import torch

from flexinfer_common.errors import ConfigError, PermanentError
from flexinfer_engine.app import build_engine
from flexinfer_engine.core.config import PRESETS, parameter_count, read_config
from flexinfer_engine.core.engine import Delta, Event, Finished, InferenceEngine
from flexinfer_engine.core.model import DecoderLM, KVCache
from flexinfer_engine.core.sampling import SamplingParams
from flexinfer_engine.core.stops import StopMatcher
from flexinfer_engine.core.tokenizer import EOS, ByteTokenizer, IncrementalDecoder
from flexinfer_engine.core.weights import generate_model
from flexinfer_engine.settings import EngineSettings


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_model(tmp_path_factory.mktemp("tiny"), name="core", preset="tiny")


@pytest.fixture(scope="module")
def engine(model_dir: Path) -> InferenceEngine:
    engine = build_engine(EngineSettings(model_dir=model_dir))
    engine.load()
    return engine


def _digests(root: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.iterdir())}


def test_generation_is_byte_identical(tmp_path: Path, model_dir: Path) -> None:
    again = generate_model(tmp_path / "again", name="core", preset="tiny")
    assert _digests(again) == _digests(model_dir)
    assert set(_digests(again)) == {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer_config.json",
    }
    other = generate_model(tmp_path / "other", name="core", preset="tiny", seed=1)
    assert _digests(other)["model.safetensors"] != _digests(model_dir)["model.safetensors"]


def test_config_is_hf_style(model_dir: Path) -> None:
    config = json.loads((model_dir / "config.json").read_text())
    assert config["architectures"] == ["FlexInferForCausalLM"]
    assert config["model_type"] == "flexinfer-ref"
    assert config["num_parameters"] == parameter_count(PRESETS["tiny"])
    for key in (
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "vocab_size",
        "max_position_embeddings",
        "torch_dtype",
    ):
        assert key in config
    assert read_config(model_dir) == PRESETS["tiny"]


def test_preset_sizes() -> None:
    counts = {name: parameter_count(config) for name, config in PRESETS.items()}
    assert 0.5e6 < counts["tiny"] < 2e6
    assert 8e6 < counts["small"] < 12e6
    assert 90e6 < counts["medium"] < 110e6
    assert 280e6 < counts["large"] < 320e6
    with torch.device("meta"):
        model = DecoderLM(PRESETS["small"])
    assert sum(p.numel() for p in model.parameters()) == counts["small"]


def test_unknown_preset(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="huge"):
        generate_model(tmp_path, name="x", preset="huge")


def test_bad_config_is_refused(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(PermanentError, match="llama"):
        read_config(tmp_path)


def test_kv_cache_matches_full_recompute(engine: InferenceEngine) -> None:
    ids = ByteTokenizer().encode("The quick brown fox jumps")
    tokens = torch.tensor([ids])
    with torch.inference_mode():
        full = engine.model(tokens)
        cache = KVCache(engine.config, 1, engine.device, engine.config.dtype)
        prefill = engine.model(tokens[:, :10], cache)
        chunk = engine.model(tokens[:, 10:14], cache)  # several new tokens after a prefix
        steps = [engine.model(tokens[:, i : i + 1], cache) for i in range(14, len(ids))]
    incremental = torch.cat([prefill, chunk, *steps], dim=1)
    assert cache.length == len(ids)
    torch.testing.assert_close(incremental, full, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("text", ["", "hello", "héllo wörld", "日本語 テキスト", "emoji 🦙🚀 ok"])
def test_tokenizer_round_trip(text: str) -> None:
    tokenizer = ByteTokenizer()
    ids = tokenizer.encode(text)
    assert ids[0] == tokenizer.bos_token_id
    assert len(ids) == 1 + len(text.encode())
    assert tokenizer.decode(ids) == text
    decoder = IncrementalDecoder()
    pieces = [decoder.push(i) for i in ids] + [decoder.flush()]
    assert "".join(pieces) == text
    for piece in pieces:
        piece.encode("utf-8")  # every streamed piece is valid UTF-8 on its own


def test_incremental_decoder_never_splits_a_character() -> None:
    decoder = IncrementalDecoder()
    emoji = "🦙".encode()
    assert [decoder.push(b) for b in emoji[:-1]] == ["", "", ""]
    assert decoder.push(emoji[-1]) == "🦙"
    assert decoder.push(0xFF) == "\ufffd"  # invalid byte: replaced, never emitted raw
    assert decoder.push(0xE6) == ""
    assert decoder.flush() == "\ufffd"  # a dangling lead byte at the end


def test_chat_template() -> None:
    tokenizer = ByteTokenizer()
    from flexinfer_engine.core.tokenizer import ChatMessage

    text = tokenizer.format_chat([ChatMessage("system", "Be brief."), ChatMessage("user", "Hi")])
    assert text == "<|system|>\nBe brief.\n<|user|>\nHi\n<|assistant|>\n"


def test_stop_matcher_holds_back_partial_matches() -> None:
    matcher = StopMatcher(["STOP", "\n\n"])
    assert matcher.feed("abc S") == "abc "
    assert matcher.feed("T") == ""
    assert matcher.feed("x") == "STx"
    assert matcher.feed("yy\n") == "yy"
    assert matcher.feed("\nzz") == ""
    assert matcher.stopped


def _run(engine: InferenceEngine, prompt: str, params: SamplingParams) -> list[Event]:
    ids = engine.tokenizer.encode(prompt)
    return list(engine.generate([ids], params, threading.Event()))


def _texts(events: list[Event], n: int) -> tuple[list[str], list[str]]:
    texts, reasons = [""] * n, [""] * n
    for event in events:
        if isinstance(event, Delta):
            texts[event.index] += event.text
        else:
            reasons[event.index] = event.finish_reason
    return texts, reasons


def test_seed_reproducibility_and_length(engine: InferenceEngine) -> None:
    params = SamplingParams(max_tokens=24, temperature=1.0, seed=42)
    first, reasons = _texts(_run(engine, "Once upon", params), 1)
    second, _ = _texts(_run(engine, "Once upon", params), 1)
    other, _ = _texts(_run(engine, "Once upon", SamplingParams(max_tokens=24, seed=43)), 1)
    assert first == second
    assert first != other
    assert reasons == ["length"]
    assert len(first[0].encode()) == 24  # letter soup: one byte per token
    assert sum(c.isalpha() or c in " .,'\n" for c in first[0]) >= 20


def test_greedy_is_deterministic_without_seed(engine: InferenceEngine) -> None:
    params = SamplingParams(max_tokens=16, temperature=0.0)
    assert _texts(_run(engine, "abc", params), 1) == _texts(_run(engine, "abc", params), 1)


def test_n_choices_are_independent(engine: InferenceEngine) -> None:
    params = SamplingParams(max_tokens=16, n=3, seed=7, top_p=0.9)
    events = _run(engine, "Hello", params)
    texts, reasons = _texts(events, 3)
    assert len(set(texts)) == 3
    assert reasons == ["length"] * 3
    finished = [e for e in events if isinstance(e, Finished)]
    assert [e.completion_tokens for e in finished] == [16, 16, 16]


def test_stop_string_truncates(engine: InferenceEngine) -> None:
    base = SamplingParams(max_tokens=40, seed=5)
    (full,), _ = _texts(_run(engine, "Story:", base), 1)
    stop = full[10:13]
    cut = full.find(stop)
    params = SamplingParams(max_tokens=40, seed=5, stop=("zzzzqq", stop))
    (text,), (reason,) = _texts(_run(engine, "Story:", params), 1)
    assert (text, reason) == (full[:cut], "stop")


def test_eos_finishes_with_stop(engine: InferenceEngine) -> None:
    # Force EOS as the most likely token by biasing the lm_head, then restore it.
    bias = engine.model.lm_head.bias
    saved = bias.detach().clone()
    with torch.no_grad():
        bias[EOS] = 1e4
    try:
        events = _run(engine, "x", SamplingParams(max_tokens=10, temperature=0.0))
    finally:
        with torch.no_grad():
            bias.copy_(saved)
    assert events[-1] == Finished(0, "stop", 1)
    ignoring = SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True)
    assert _run(engine, "x", ignoring)[-1] == Finished(0, "length", 3)


def test_cancel_stops_generation(engine: InferenceEngine) -> None:
    cancel = threading.Event()
    events = engine.generate([[256, 65]], SamplingParams(max_tokens=200, seed=1), cancel)
    seen = [next(events) for _ in range(3)]
    cancel.set()
    assert list(events) == []
    assert len(seen) == 3


def test_sleep_frees_parameters_and_wake_restores(model_dir: Path) -> None:
    engine = build_engine(EngineSettings(model_dir=model_dir))
    engine.load()
    params = SamplingParams(max_tokens=12, seed=9)
    before = _texts(_run(engine, "hi", params), 1)
    size = engine.parameter_bytes()
    assert size > 0
    for level in (1, 2):
        engine.sleep(level)
        assert engine.parameter_bytes() == 0
        assert all(p.device.type == "meta" for p in engine.model.parameters())
        engine.wake()
        assert engine.parameter_bytes() == size
        assert _texts(_run(engine, "hi", params), 1) == before


def test_a_level_1_sleep_on_the_cpu_keeps_the_weights_where_they_are(model_dir: Path) -> None:
    engine = build_engine(EngineSettings(model_dir=model_dir))
    engine.load()
    where = {k: v.data_ptr() for k, v in engine.model.state_dict().items()}
    engine.sleep(1)
    assert engine.parameter_bytes() == 0
    engine.wake()
    assert {k: v.data_ptr() for k, v in engine.model.state_dict().items()} == where


def test_kv_cache_positions_count_the_running_generations(engine: InferenceEngine) -> None:
    assert engine.kv_cache_positions() == 0
    params = SamplingParams(max_tokens=50, n=2, seed=3, ignore_eos=True)
    running = engine.generate([[256, 65, 66]], params, threading.Event())
    assert isinstance(running, Generator)  # closing it is how a cancelled request ends
    next(running)  # paused at the first token, sampled from the prompt: its cache is live
    assert engine.kv_cache_positions() == 2 * 3  # two rows of the three prompt positions
    for _ in range(2 * 5):  # five more tokens per row, each fed back before the next
        next(running)
    assert engine.kv_cache_positions() == 2 * (3 + 5)
    running.close()
    assert engine.kv_cache_positions() == 0
