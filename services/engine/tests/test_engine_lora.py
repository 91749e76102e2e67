"""LoRA in the engine core: the adapter path against merged weights, mixed batches, the
PEFT reader's refusals, the registry's limits and roots, the adapter generator."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from flexinfer_engine.core.adapter_weights import generate_adapter
from flexinfer_engine.core.adapters import AdapterRegistry, LoRALimits
from flexinfer_engine.core.engine import Delta, InferenceEngine
from flexinfer_engine.core.lora import (
    Adapter,
    LoRABatch,
    LoRAError,
    LoRAInputError,
    LoRANotFoundError,
    linear_shapes,
)
from flexinfer_engine.core.model import DecoderLM, KVCache
from flexinfer_engine.core.sampling import SamplingParams
from flexinfer_engine.core.weights import generate_model
from flexinfer_testing.engines import loaded_engine


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_model(tmp_path_factory.mktemp("tiny"), name="lora", preset="tiny")


@pytest.fixture(scope="module")
def engine(model_dir: Path) -> InferenceEngine:
    return loaded_engine(model_dir)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("adapters")


def registry(
    engine: InferenceEngine, roots: tuple[Path, ...], *, max_loras: int = 4, max_rank: int = 16
) -> AdapterRegistry:
    """A registry for ``engine`` (served as "base") trusting ``roots``."""
    return AdapterRegistry(
        LoRALimits(max_loras, max_rank, roots),
        linear_shapes(engine.model),
        base_name="base",
        device=engine.device,
        dtype=engine.config.dtype,
    )


def read(engine: InferenceEngine, path: Path, root: Path, **limits: int) -> Adapter:
    """The adapter at ``path``, read through a registry trusting ``root``."""
    return registry(engine, (root,), **limits).read(path.name, str(path))


def merged_model(engine: InferenceEngine, adapter: Adapter) -> DecoderLM:
    """A plain model whose weights are W + scale * B @ A: the reference for the LoRA path."""
    state = {k: v.detach().clone() for k, v in engine.model.state_dict().items()}
    for module, pair in adapter.pairs.items():
        state[f"{module}.weight"] += adapter.scale * (pair.b @ pair.a)
    model = DecoderLM(engine.config).eval()
    model.load_state_dict(state, strict=True)
    return model


def _tokens(engine: InferenceEngine, text: str) -> torch.Tensor:
    return torch.tensor([engine.tokenizer.encode(text)])


def _edit_config(path: Path, **changes: object) -> None:
    config = json.loads((path / "adapter_config.json").read_text())
    (path / "adapter_config.json").write_text(json.dumps({**config, **changes}))


@pytest.mark.parametrize(
    ("rank", "alpha", "targets", "rslora"),
    [
        (8, 16.0, ("qkv", "out", "fc_in", "fc_out"), False),
        (4, 3.0, ("qkv", "fc_out", "lm_head"), True),
    ],
)
def test_adapter_logits_equal_the_merged_weights(
    engine: InferenceEngine,
    root: Path,
    rank: int,
    alpha: float,
    targets: tuple[str, ...],
    rslora: bool,
) -> None:
    path = generate_adapter(
        root / f"diff-{rank}", name=f"diff-{rank}", model_dir=engine.model_dir, rank=rank,
        alpha=alpha, targets=targets,
    )  # fmt: skip
    _edit_config(path, use_rslora=rslora)
    adapter = read(engine, path, root)
    assert adapter.scale == pytest.approx(alpha / (rank**0.5 if rslora else rank))
    assert {m.rsplit(".", 1)[-1] for m in adapter.pairs} == set(targets)
    reference = merged_model(engine, adapter)
    tokens = _tokens(engine, "The quick brown fox jumps over")
    with torch.inference_mode():
        expected = reference(tokens)
        lora = LoRABatch.of([adapter], engine.device)
        full = engine.model(tokens, None, lora)
        cache = KVCache(engine.config, 1, engine.device, engine.config.dtype)
        steps = [engine.model(tokens[:, :12], cache, lora)]
        steps += [engine.model(tokens[:, i : i + 1], cache, lora) for i in range(12, 31)]
        base = engine.model(tokens)
    torch.testing.assert_close(full, expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(torch.cat(steps, dim=1), expected, atol=1e-4, rtol=1e-4)
    assert (full - base).abs().max() > 0.1, "the adapter must change the logits"


def test_a_mixed_batch_gives_each_row_its_own_adapter(engine: InferenceEngine, root: Path) -> None:
    one = read(engine, generate_adapter(root / "m1", name="m1", model_dir=engine.model_dir), root)
    two = read(engine, generate_adapter(root / "m2", name="m2", model_dir=engine.model_dir), root)
    rows = [one, None, two, one]
    tokens = _tokens(engine, "Hello there").repeat(len(rows), 1)
    with torch.inference_mode():
        batch = engine.model(tokens, None, LoRABatch.of(rows, engine.device))
        alone = [engine.model(tokens[:1], None, LoRABatch.of([a], engine.device)) for a in rows]
    for row, single in enumerate(alone):
        torch.testing.assert_close(batch[row : row + 1], single, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(alone[0], alone[1])
    assert not torch.allclose(alone[0], alone[2])


def test_generation_with_an_adapter_differs_and_is_reproducible(
    engine: InferenceEngine, root: Path
) -> None:
    adapter = read(engine, generate_adapter(root / "g", name="g", model_dir=engine.model_dir), root)
    params = SamplingParams(max_tokens=40, seed=3)

    def text(chosen: Adapter | None) -> str:
        ids = engine.tokenizer.encode("Once upon a time")
        events = engine.generate([ids], params, threading.Event(), chosen)
        return "".join(e.text for e in events if isinstance(e, Delta))

    assert text(adapter) == text(adapter)
    assert text(adapter) != text(None)


def test_the_generator_is_deterministic(model_dir: Path, tmp_path: Path) -> None:
    first = generate_adapter(tmp_path / "a", name="x", model_dir=model_dir, seed=1)
    again = generate_adapter(tmp_path / "b", name="x", model_dir=model_dir, seed=1)
    other = generate_adapter(tmp_path / "c", name="x", model_dir=model_dir, seed=2)
    files = ("adapter_model.safetensors", "adapter_config.json")
    for name in files:
        assert (first / name).read_bytes() == (again / name).read_bytes()
    assert (first / files[0]).read_bytes() != (other / files[0]).read_bytes()
    config = json.loads((first / "adapter_config.json").read_text())
    assert (config["peft_type"], config["r"], config["lora_alpha"]) == ("LORA", 8, 16.0)
    keys = set(load_file(first / "adapter_model.safetensors"))
    assert "base_model.model.layers.0.attn.qkv.lora_A.weight" in keys
    assert len(keys) == 2 * 4 * 4  # A and B of four linears in each of four layers


def test_the_generator_refuses_unknown_targets(model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(LoRAError, match="c_attn"):
        generate_adapter(tmp_path, name="x", model_dir=model_dir, targets=["c_attn"])


def _rewrite_weights(path: Path, change: Callable[[dict[str, torch.Tensor]], None]) -> None:
    tensors = load_file(path / "adapter_model.safetensors")
    change(tensors)
    save_file(tensors, path / "adapter_model.safetensors")


def _drop_b(t: dict[str, torch.Tensor]) -> None:
    del t["base_model.model.layers.1.fc_in.lora_B.weight"]


def _add_bias(t: dict[str, torch.Tensor]) -> None:
    t["base_model.model.layers.0.fc_in.lora_B.bias"] = torch.zeros(512)


def _add_nan(t: dict[str, torch.Tensor]) -> None:
    t["base_model.model.layers.0.fc_in.lora_A.weight"][0, 0] = float("nan")


def _unknown_module(t: dict[str, torch.Tensor]) -> None:
    t["base_model.model.layers.9.fc_in.lora_A.weight"] = torch.zeros(8, 128)


def _narrow(t: dict[str, torch.Tensor]) -> None:
    key = "base_model.model.layers.0.attn.out.lora_A.weight"
    t[key] = t[key][:, :64].contiguous()


BROKEN_WEIGHTS = {
    "missing B": (_drop_b, "lack a lora_A or lora_B"),
    "bias tensor": (_add_bias, "unexpected tensor"),
    "nan": (_add_nan, "finite"),
    "no such layer": (_unknown_module, "names no linear layer"),
    "shape": (_narrow, r"has shape \[8, 64\], expected \[8, 128\]"),
}


@pytest.mark.parametrize("case", sorted(BROKEN_WEIGHTS))
def test_broken_weights_are_refused(engine: InferenceEngine, tmp_path: Path, case: str) -> None:
    change, message = BROKEN_WEIGHTS[case]
    path = generate_adapter(tmp_path / "bad", name="bad", model_dir=engine.model_dir)
    _rewrite_weights(path, change)
    with pytest.raises(LoRAError, match=message):
        read(engine, path, tmp_path)


BROKEN_CONFIGS: dict[str, tuple[dict[str, object], str]] = {
    "rank too high": ({"r": 32}, "LoRA rank 32 is greater than max_lora_rank 16."),
    "unknown target": (
        {"target_modules": ["q_proj", "qkv"]},
        r"Unknown target modules \['q_proj'\]",
    ),
    "narrower targets": ({"target_modules": ["qkv"]}, "outside the config's target_modules"),
    "regex target": ({"target_modules": r"layers\.0\..*"}, "outside the config's target_modules"),
    "bad regex": ({"target_modules": "("}, "not a valid regex"),
    "dora": ({"use_dora": True}, "DoRA"),
    "bias": ({"bias": "all"}, "bias"),
    "not lora": ({"peft_type": "PREFIX_TUNING"}, "only LORA"),
    "bad alpha": ({"lora_alpha": "x"}, "lora_alpha must be a positive number"),
    "no targets": ({"target_modules": []}, "target_modules must be"),
}


@pytest.mark.parametrize("case", sorted(BROKEN_CONFIGS))
def test_broken_configs_are_refused(engine: InferenceEngine, tmp_path: Path, case: str) -> None:
    changes, message = BROKEN_CONFIGS[case]
    path = generate_adapter(tmp_path / "bad", name="bad", model_dir=engine.model_dir)
    _edit_config(path, **changes)
    with pytest.raises(LoRAError, match=message):
        read(engine, path, tmp_path)


@pytest.mark.parametrize(
    "targets", ["all-linear", r"layers\.\d\.(attn\.qkv|attn\.out|fc_in|fc_out)"]
)
def test_peft_target_forms_are_understood(
    engine: InferenceEngine, tmp_path: Path, targets: str
) -> None:
    path = generate_adapter(tmp_path / "t", name="t", model_dir=engine.model_dir)
    _edit_config(path, target_modules=targets)
    assert len(read(engine, path, tmp_path).pairs) == 4 * 4


def test_a_rank_above_the_engines_maximum_is_refused(engine: InferenceEngine, root: Path) -> None:
    path = generate_adapter(root / "r8", name="r8", model_dir=engine.model_dir, rank=8)
    with pytest.raises(LoRAError, match=r"^LoRA rank 8 is greater than max_lora_rank 4\.$"):
        read(engine, path, root, max_rank=4)


def test_an_adapter_of_another_model_is_refused(engine: InferenceEngine, tmp_path: Path) -> None:
    small = generate_model(tmp_path / "small", name="s", preset="small")
    path = generate_adapter(tmp_path / "other", name="other", model_dir=small)
    with pytest.raises(LoRAError, match="has shape"):
        read(engine, path, tmp_path)


def test_unreadable_files_are_refused(engine: InferenceEngine, tmp_path: Path) -> None:
    path = generate_adapter(tmp_path / "bad", name="bad", model_dir=engine.model_dir)
    (path / "adapter_model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(LoRAError, match="not a valid safetensors file"):
        read(engine, path, tmp_path)
    (path / "adapter_model.safetensors").unlink()
    (path / "adapter_model.bin").write_bytes(b"pickle")
    with pytest.raises(LoRAError, match=r"has no adapter_model\.safetensors"):
        read(engine, path, tmp_path)
    (path / "adapter_config.json").write_text("{")
    with pytest.raises(LoRAError, match="not valid JSON"):
        read(engine, path, tmp_path)


def test_paths_outside_the_roots_are_refused(engine: InferenceEngine, tmp_path: Path) -> None:
    trusted, elsewhere = tmp_path / "trusted", tmp_path / "elsewhere"
    trusted.mkdir()
    path = generate_adapter(elsewhere / "a", name="a", model_dir=engine.model_dir)
    (trusted / "link").symlink_to(path)
    adapters = registry(engine, (trusted,))
    for given in (str(path), str(trusted / "link"), str(trusted / ".." / "elsewhere" / "a")):
        with pytest.raises(LoRAError, match="outside the engine's adapter roots"):
            adapters.read("a", given)
    with pytest.raises(LoRAError, match="must be an absolute path"):
        adapters.read("a", "trusted/a")
    with pytest.raises(LoRANotFoundError, match=r"^Loading lora a failed: No adapter found for /"):
        adapters.read("a", str(trusted / "missing"))
    with pytest.raises(LoRAError, match="no adapter roots are configured"):
        registry(engine, ()).read("a", str(path))


def test_a_config_linked_out_of_the_root_is_refused(
    engine: InferenceEngine, tmp_path: Path
) -> None:
    outside = generate_adapter(tmp_path / "outside", name="o", model_dir=engine.model_dir)
    inside = generate_adapter(tmp_path / "root" / "a", name="a", model_dir=engine.model_dir)
    (inside / "adapter_config.json").unlink()
    (inside / "adapter_config.json").symlink_to(outside / "adapter_config.json")
    with pytest.raises(LoRAError, match="outside the engine's adapter roots"):
        registry(engine, (tmp_path / "root",)).read("a", str(inside))


def test_registry_names_and_limits(engine: InferenceEngine, root: Path) -> None:
    adapters = registry(engine, (root,), max_loras=2)
    path = generate_adapter(root / "n", name="n", model_dir=engine.model_dir)
    refusals: list[tuple[str, str, type[Exception], str]] = [
        ("", str(path), LoRAInputError, "Both 'lora_name' and 'lora_path' must be provided."),
        ("x", "", LoRAInputError, "Both 'lora_name' and 'lora_path' must be provided."),
        ("base", str(path), LoRAInputError, "the base model's name"),
        ("a\nb", str(path), LoRAInputError, "control characters"),
        ("x", str(path) + "\x00", LoRAInputError, "control characters"),
        ("x" * 300, str(path), LoRAInputError, "longer than 256"),
    ]
    for name, given, kind, message in refusals:
        with pytest.raises(kind, match=message):
            adapters.check_load(name, given)
    for name in ("one", "two"):
        adapters.check_load(name, str(path))
        adapters.add(adapters.read(name, str(path)))
    with pytest.raises(LoRAInputError, match=r"^The lora adapter 'one' has already been loaded\.$"):
        adapters.check_load("one", str(path))
    adapters.check_load("one", str(path), replace=True)
    with pytest.raises(LoRAError, match=r"2 adapters are loaded.*--max-loras 2"):
        adapters.check_load("three", str(path))
    assert [a.name for a in adapters.loaded()] == ["one", "two"]
    adapters.remove("one")
    with pytest.raises(LoRANotFoundError, match=r"^The lora adapter 'one' cannot be found\.$"):
        adapters.remove("one")
    adapters.check_load("three", str(path))


def test_the_base_weights_are_never_written(engine: InferenceEngine, root: Path) -> None:
    before = {k: v.detach().clone() for k, v in engine.model.state_dict().items()}
    tokens = _tokens(engine, "unchanged")
    with torch.inference_mode():
        base_logits = engine.model(tokens)
    adapters = registry(engine, (root,))
    path = generate_adapter(root / "w", name="w", model_dir=engine.model_dir)
    adapter = adapters.read("w", str(path))
    adapters.add(adapter)
    with torch.inference_mode():
        engine.model(tokens, None, LoRABatch.of([adapter], engine.device))
    adapters.remove("w")
    after = engine.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    with torch.inference_mode():
        assert torch.equal(engine.model(tokens), base_logits)
