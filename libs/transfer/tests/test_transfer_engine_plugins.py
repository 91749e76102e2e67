"""The parts of FlexInfer's vLLM and SGLang loaders that run without those engines: the
entry point vLLM discovers, the clear error where an engine is missing, and the
LoadWeightsAdapter both loaders use (checkpoint names through the model's own
``load_weights``; a peer's post-processed tensors READ into a post-processed skeleton)."""

from __future__ import annotations

import asyncio
import atexit
import importlib
import re
import sys
from collections.abc import AsyncIterator, Iterable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
import torch
from prometheus_client import CollectorRegistry
from pydantic import SecretStr
from safetensors.torch import save_file
from torch import nn

from flexinfer_common.mx_identity import SourceIdentity
from flexinfer_common.serving import serve_in_background
from flexinfer_registry.app import create_app
from flexinfer_registry.settings import RegistrySettings
from flexinfer_transfer import (
    ReaderSettings,
    SourceCandidate,
    StrategyParts,
    TransferMetrics,
    create_selector,
    create_strategy_chain,
)
from flexinfer_transfer.adapter_loader import AdapterLoader, AdapterTarget
from flexinfer_transfer.engine_loading import EngineLoadingSettings, Loading
from flexinfer_transfer.engines.embedded import load_through_chain, model_directory
from flexinfer_transfer.engines.module_adapter import LoadWeightsAdapter
from flexinfer_transfer.strategy import LoadContext
from flexinfer_transfer.testing import LocalSource, LocalTransport


def test_the_vllm_plugin_is_declared_as_an_entry_point() -> None:
    found = {ep.name: ep for ep in entry_points(group="vllm.general_plugins")}
    assert "flexinfer" in found, "reinstall libs/transfer (./dev setup) to declare it"
    assert found["flexinfer"].value == "flexinfer_transfer.engines.vllm_plugin:register"


def test_a_local_model_directory_is_used_as_is_and_a_name_goes_to_the_engines_downloader(
    tmp_path: Path,
) -> None:
    asked: list[str] = []

    def download(name: str) -> str:
        asked.append(name)
        return str(tmp_path / "hub" / name)

    assert model_directory(str(tmp_path), download) == tmp_path
    assert asked == []
    assert model_directory("org/model", download) == tmp_path / "hub" / "org/model"
    assert asked == ["org/model"]


def test_the_plugin_loads_and_registers_nothing_without_vllm(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # vLLM absent, even where installed
    (plugin,) = [ep for ep in entry_points(group="vllm.general_plugins") if ep.name == "flexinfer"]
    register = plugin.load()
    assert register() is False


@pytest.mark.parametrize(
    ("module", "engine", "install"),
    [("vllm_loader", "vllm", "pip install vllm"), ("sglang_loader", "sglang", "sglang[srt]")],
)
def test_an_engine_module_without_its_engine_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, module: str, engine: str, install: str
) -> None:
    monkeypatch.setitem(sys.modules, engine, None)
    monkeypatch.delitem(sys.modules, f"flexinfer_transfer.engines.{module}", raising=False)
    with pytest.raises(ImportError, match=re.escape(install)) as raised:
        importlib.import_module(f"flexinfer_transfer.engines.{module}")
    assert raised.value.name == engine
    assert f"{engine} is not installed" in str(raised.value)


class Fused(nn.Module):
    """An engine model in miniature: fused parameters its ``load_weights`` fills from
    checkpoint names, and a post-processing step that must run exactly once."""

    def __init__(self) -> None:
        super().__init__()
        self.qk = nn.Parameter(torch.empty(8, 4))
        self.scale = nn.Parameter(torch.empty(4))
        self.processed = 0

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        for name, tensor in weights:
            if name == "scale":
                self.scale.data.copy_(tensor)
            else:
                rows = slice(0, 4) if name == "q" else slice(4, 8)
                self.qk.data[rows].copy_(tensor)


def repack(model: nn.Module) -> None:
    """Not idempotent, as quantization repacking is not: twice would be wrong."""
    assert isinstance(model, Fused)
    model.scale.data.mul_(2)
    model.processed += 1


CHECKPOINT = {"q": torch.full((4, 4), 1.0), "k": torch.full((4, 4), 2.0), "scale": torch.ones(4)}


def served() -> Fused:
    """What a live source serves: the checkpoint loaded and post-processed."""
    model = Fused()
    model.load_weights(CHECKPOINT.items())
    repack(model)
    return model


def _loader(tmp_path: Path, sources: list[LocalSource]) -> AdapterLoader:
    save_file(CHECKPOINT, tmp_path / "model.safetensors")
    target = AdapterTarget()
    parts = StrategyParts(
        TransferMetrics(CollectorRegistry()),
        create_selector("random"),
        ReaderSettings(),
        LocalTransport(sources, target),
    )
    chain = create_strategy_chain(["rdma", "default"], parts)
    return AdapterLoader(chain, target, LoadContext(tmp_path, accelerator="cpu"))


def _source(name: str, fail_after: int | None = None) -> LocalSource:
    return LocalSource(SourceCandidate(name, "w0", accelerator="cpu"), served(), fail_after)


def _check(model: nn.Module | None) -> Fused:
    assert isinstance(model, Fused)
    want = served()
    assert torch.equal(model.qk, want.qk)
    assert torch.equal(model.scale, want.scale)  # 2.0: post-processed once, not twice
    assert model.processed == 1
    assert not model.training
    return model


def test_a_file_load_goes_through_the_models_own_load_weights(tmp_path: Path) -> None:
    adapter = LoadWeightsAdapter(Fused, repack)
    report = _loader(tmp_path, []).load(adapter)
    assert report.strategy == "default"
    assert not adapter.peer_loaded
    _check(adapter.model)


def test_a_peer_fills_a_post_processed_skeleton_that_is_not_processed_again(
    tmp_path: Path,
) -> None:
    adapter = LoadWeightsAdapter(Fused, repack)
    report = _loader(tmp_path, [_source("good")]).load(adapter)
    assert report.strategy == "rdma"
    assert adapter.peer_loaded
    _check(adapter.model)


def test_after_a_failed_peer_the_files_load_into_a_fresh_unprocessed_model(
    tmp_path: Path,
) -> None:
    built: list[Fused] = []

    def build() -> Fused:
        built.append(Fused())
        return built[-1]

    adapter = LoadWeightsAdapter(build, repack)
    report = _loader(tmp_path, [_source("dying", fail_after=1)]).load(adapter)
    assert report.strategy == "default"
    assert not adapter.peer_loaded
    assert len(built) == 2  # the half-written, processed skeleton was not reused
    assert adapter.model is built[-1]
    _check(adapter.model)


def test_a_skeleton_gets_the_fixups_load_weights_would_have_run(tmp_path: Path) -> None:
    fixups: list[str] = []

    def skeleton_post(model: nn.Module) -> None:
        fixups.append("post_load_weights")
        repack(model)

    adapter = LoadWeightsAdapter(Fused, repack, skeleton_post)
    _loader(tmp_path, [_source("good")]).load(adapter)
    assert fixups == ["post_load_weights"]
    _check(adapter.model)


def test_embedded_loaders_read_flexinfers_or_modelexpress_env_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MX_SERVER_ADDRESS", "mx-server:8001")
    monkeypatch.setenv("MX_MODEL_REVISION", "abc123")
    assert EngineLoadingSettings().registry == "mx-server:8001"
    assert EngineLoadingSettings().revision == "abc123"
    monkeypatch.setenv("FLEXINFER_TRANSFER_REGISTRY", "registry:50051")
    assert EngineLoadingSettings().registry == "registry:50051"  # ours first
    assert not EngineLoadingSettings().serve_peers  # serving peers is opted into


def _loading(worker_id: str) -> Loading:
    identity = SourceIdentity(model_name="org/fused", dtype="float32", tensor_parallel_size=1)
    return Loading(identity, worker_id, device="cpu", accelerator="cpu")


def test_load_through_chain_without_a_registry_loads_the_files(tmp_path: Path) -> None:
    save_file(CHECKPOINT, tmp_path / "model.safetensors")
    settings = EngineLoadingSettings(registry="", serve_peers=False)
    loaded = load_through_chain(tmp_path, _loading("w0"), Fused, repack, settings)
    assert loaded.report.strategy != "rdma"
    assert loaded.source is None
    _check(loaded.model)


@pytest.fixture
async def registry(tmp_path: Path) -> AsyncIterator[str]:
    """A real registry (in-process, memory store), its P2pService over gRPC."""
    app: Any = create_app(RegistrySettings(port=0, grpc_port=0, cache_dir=tmp_path / "reg"))
    async with serve_in_background(app):
        yield str(app.state.grpc_address)


async def test_a_second_embedded_load_reads_the_first_over_nixl(
    registry: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEXINFER_TRANSFER_SOURCE_REGISTRY", registry)
    # The registry serves on this event loop: everything that blocks runs in a thread.
    await asyncio.to_thread(_first_serves_second_reads, registry, tmp_path)


P2P_TOKEN = "p2p-token-0123456789abcdef"


@pytest.fixture
async def guarded_registry(tmp_path: Path) -> AsyncIterator[str]:
    """A registry started with an admin and a P2P token."""
    settings = RegistrySettings(
        port=0,
        grpc_port=0,
        cache_dir=tmp_path / "reg",
        auth_token=SecretStr("admin-token-0123456789abcdef"),
        p2p_token=SecretStr(P2P_TOKEN),
    )
    app: Any = create_app(settings)
    async with serve_in_background(app):
        yield str(app.state.grpc_address)


async def test_embedded_loads_send_the_registrys_p2p_token(
    guarded_registry: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEXINFER_TRANSFER_SOURCE_REGISTRY", guarded_registry)
    token_file = tmp_path / "token"
    token_file.write_text(P2P_TOKEN + "\n")
    monkeypatch.setenv("FLEXINFER_TRANSFER_REGISTRY_TOKEN_FILE", str(token_file))
    assert EngineLoadingSettings().registry_bearer() == P2P_TOKEN
    monkeypatch.delenv("FLEXINFER_TRANSFER_REGISTRY_TOKEN_FILE")
    await asyncio.to_thread(
        _first_serves_second_reads, guarded_registry, tmp_path, SecretStr(P2P_TOKEN)
    )


def _first_serves_second_reads(
    registry: str, tmp_path: Path, token: SecretStr | None = None
) -> None:
    save_file(CHECKPOINT, tmp_path / "model.safetensors")
    serving = EngineLoadingSettings(serve_peers=True, registry_token=token)
    first = load_through_chain(tmp_path, _loading("first"), Fused, repack, serving)
    assert first.source is not None
    assert first.source.publisher is not None
    try:
        assert first.source.publisher.published.wait(30)
        settings = EngineLoadingSettings(registry=registry, serve_peers=False, registry_token=token)
        second = load_through_chain(tmp_path, _loading("second"), Fused, repack, settings)
    finally:
        assert first.source.stop()
        atexit.unregister(first.source.stop)
    assert second.report.strategy == "rdma"
    assert second.report.source.endswith("/first")
    _check(second.model)  # the served (post-processed) bytes, not processed again
