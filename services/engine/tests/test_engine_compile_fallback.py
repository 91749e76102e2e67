"""Compile mode without compiling: what a sealed cache holds, the cache's identity, and
when a replica fetches a cache from a peer or builds it itself (a real registry over gRPC
and real artifact sources over NIXL; the only torch.compile here is one that cannot find
its C++ compiler)."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import torch
from prometheus_client import CollectorRegistry

from flexinfer_common.mx_identity import SourceIdentity
from flexinfer_common.serving import serve_in_background
from flexinfer_engine.compile_cache import TORCH_COMPILE_CACHE, CompileCache, cache_identity
from flexinfer_engine.core.sampling import SamplingParams
from flexinfer_engine.core.weights import generate_model
from flexinfer_engine.settings import EngineSettings
from flexinfer_registry.app import create_app as create_registry
from flexinfer_registry.settings import RegistrySettings
from flexinfer_testing.artifacts import published_cache, tree
from flexinfer_testing.clients import wait_until
from flexinfer_testing.engines import loaded_engine
from flexinfer_transfer.artifact_discovery import ArtifactNeed, candidates
from flexinfer_transfer.artifact_source import ArtifactSource, seal_directory
from flexinfer_transfer.metrics import TransferMetrics
from flexinfer_transfer.registry_directory import RegistryDirectory

WEIGHTS = SourceIdentity(model_name="cached-tiny", dtype="float32", revision="fp_0123")
IDENTITY = cache_identity(WEIGHTS, torch.device("cpu"))
FALLBACKS = "flexinfer_engine_compile_cache_fallbacks_total"


def test_a_sealed_cache_leaves_out_locks_temporaries_and_bytecode(tmp_path: Path) -> None:
    cache = tmp_path / "inductor"
    kept = {
        "fxgraph/kb/fkb/entry": b"graph",
        "aotautograd/a3/entry": b"aot",
        "ou/cou.main.so": b"\x7fELF",
        "ou/cou.main.cpp": b"int main;",
        "triton/0/kernel.json": b"{}",
    }
    dropped = {
        "locks/cou.lock": b"",
        "ou/cou.main.so.lock": b"",
        "fxgraph/tmpa1b2c3": b"half",
        ".inductor.partial-x/file": b"staged",
        "__pycache__/c.cpython-311.pyc": b"pyc",
        "ou/c.pyc": b"pyc",
    }
    for path, data in {**kept, **dropped}.items():
        (cache / path).parent.mkdir(parents=True, exist_ok=True)
        (cache / path).write_bytes(data)
    (cache / "link.so").symlink_to(cache / "ou/cou.main.so")
    bundle = seal_directory(cache, tmp_path / "bundles")
    assert tree(bundle) == kept
    assert not any(p.is_symlink() for p in bundle.rglob("*"))
    assert bundle.parent == tmp_path / "bundles"
    assert seal_directory(cache, tmp_path / "bundles") != bundle  # a fresh one each time
    assert (cache / "locks/cou.lock").exists()  # the live cache is untouched


def test_the_cache_identity_is_the_weights_plus_what_compiling_depends_on() -> None:
    assert IDENTITY.mx_source_type == TORCH_COMPILE_CACHE
    assert (IDENTITY.model_name, IDENTITY.revision) == (WEIGHTS.model_name, WEIGHTS.revision)
    assert IDENTITY.torch_version == torch.__version__
    assert IDENTITY.gpu_arch.startswith("cpu-")
    assert IDENTITY.compile_config_digest
    assert IDENTITY.mx_source_id != WEIGHTS.mx_source_id


@pytest.fixture
async def registry(tmp_path: Path) -> AsyncIterator[str]:
    app: Any = create_registry(RegistrySettings(port=0, grpc_port=0, cache_dir=tmp_path / "reg"))
    async with serve_in_background(app):
        yield str(app.state.grpc_address)


@pytest.fixture
def restore_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """CompileCache points inductor's variables at its directory: restored afterwards."""
    for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        monkeypatch.setenv(name, os.environ.get(name, ""))
    for name in ("TORCHINDUCTOR_FX_GRAPH_CACHE", "TORCHINDUCTOR_AUTOGRAD_CACHE"):
        monkeypatch.setenv(name, os.environ.get(name, "1"))


def _compile_cache(tmp_path: Path, registry: str, *, sharing: bool = True) -> CompileCache:
    settings = EngineSettings(
        registry=registry,
        compile=True,
        compile_cache_dir=tmp_path / "target" / "inductor",
        artifact_transfer=sharing,
    )
    metrics = CollectorRegistry()
    return CompileCache(settings, WEIGHTS, "target", TransferMetrics(metrics), metrics)


def _fallbacks(compiled: CompileCache, reason: str) -> float:
    return float(compiled.fallbacks.labels(reason)._value.get())


def _listed(registry: str, identity: SourceIdentity) -> bool:
    return bool(candidates(RegistryDirectory(registry), ArtifactNeed(identity, "cpu")))


def _published(registry: str, tmp_path: Path, identity: SourceIdentity, **role: Any) -> Any:
    donor = published_cache(registry, identity, tmp_path / "donor", "donor", **role)
    wait_until(lambda: _wait_published(donor), 30, "the donor published")
    return donor


def _wait_published(donor: ArtifactSource) -> bool:
    return donor.publisher is not None and donor.publisher.published.is_set()


@pytest.mark.usefixtures("restore_env")
async def test_no_fetch_without_transfer_or_over_a_cache_of_its_own(
    registry: str, tmp_path: Path
) -> None:
    off = _compile_cache(tmp_path, registry, sharing=False)
    assert await asyncio.to_thread(off.fetch, IDENTITY, "cpu") == (None, 0.0, "")
    on = _compile_cache(tmp_path, registry)
    (on.cache_dir / "fxgraph").mkdir(parents=True)  # compiled here before a restart
    assert await asyncio.to_thread(on.fetch, IDENTITY, "cpu") == (None, 0.0, "cache_present")
    assert _fallbacks(on, "cache_present") == 0  # its own cache is no fallback


@pytest.mark.usefixtures("restore_env")
async def test_only_a_source_of_the_same_identity_and_family_is_a_candidate(
    registry: str, tmp_path: Path
) -> None:
    compiled = _compile_cache(tmp_path, registry)
    other_torch = IDENTITY.__class__(**{**IDENTITY.to_dict(), "torch_version": "0.0.1"})
    donor = await asyncio.to_thread(_published, registry, tmp_path, other_torch)
    try:
        _, _, reason = await asyncio.to_thread(compiled.fetch, IDENTITY, "cpu")
        assert reason == "no_source"
        assert _fallbacks(compiled, "no_source") == 1
    finally:
        await asyncio.to_thread(donor.stop)
    gpu = await asyncio.to_thread(
        _published, registry, tmp_path / "gpu", IDENTITY, accelerator="cuda"
    )
    try:
        assert await asyncio.to_thread(_listed, registry, IDENTITY) is False  # strict family
        _, _, reason = await asyncio.to_thread(compiled.fetch, IDENTITY, "cpu")
        assert reason == "no_source"
    finally:
        await asyncio.to_thread(gpu.stop)


@pytest.mark.usefixtures("restore_env")
async def test_a_donor_gone_leaves_nothing_installed_and_is_counted(
    registry: str, tmp_path: Path
) -> None:
    compiled = _compile_cache(tmp_path, registry)
    donor = await asyncio.to_thread(_published, registry, tmp_path, IDENTITY)
    try:
        donor.grpc.stop(None)  # it died: still listed READY until its heartbeat expires
        assert await asyncio.to_thread(_listed, registry, IDENTITY)
        fetched, seconds, reason = await asyncio.to_thread(compiled.fetch, IDENTITY, "cpu")
        assert (fetched, reason) == (None, "unavailable")
        assert seconds > 0
        assert _fallbacks(compiled, "unavailable") == 1
        assert not compiled.cache_dir.exists()
        assert list(compiled.cache_dir.parent.glob("*")) == []  # no staging left behind
    finally:
        await asyncio.to_thread(donor.stop)


@pytest.mark.usefixtures("restore_env")
async def test_a_live_donor_installs_its_cache(registry: str, tmp_path: Path) -> None:
    compiled = _compile_cache(tmp_path, registry)
    donor = await asyncio.to_thread(_published, registry, tmp_path, IDENTITY)
    try:
        fetched, _, reason = await asyncio.to_thread(compiled.fetch, IDENTITY, "cpu")
        assert reason == ""
        assert fetched is not None
        assert fetched.source == f"{IDENTITY.mx_source_id}/donor"
        assert tree(compiled.cache_dir) == tree(donor.bundle)
    finally:
        await asyncio.to_thread(donor.stop)
    assert not donor.bundle.exists()  # withdrawn: the sealed copy goes too


@pytest.mark.usefixtures("restore_env")
def test_a_compile_that_fails_leaves_the_model_eager(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch._inductor.config as inductor

    model_dir = generate_model(tmp_path / "model", name="eager-tiny", preset="tiny")
    engine = loaded_engine(model_dir)
    prompt = [[ord(c) for c in "still serving"]]
    params = SamplingParams(max_tokens=6, seed=5)
    want = list(engine.generate(prompt, params, threading.Event()))
    compiled = _compile_cache(tmp_path, "", sharing=False)
    monkeypatch.setattr(inductor.cpp, "cxx", (None, str(tmp_path / "no-such-compiler")))
    report = compiled.prepare(engine)
    assert report.source == "none"
    assert report.fallback_reason.startswith("compile failed")
    assert list(engine.generate(prompt, params, threading.Event())) == want
