"""NIXL peer transfers between real processes over UCX, discovered through the registry's
real gRPC server: a donor process serves a torch model, this process pulls it through the
load strategy chain; a donor killed mid-transfer makes the chain fall back to files."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import torch
from prometheus_client import CollectorRegistry
from safetensors.torch import save_file

from flexinfer_common.serving import serve_in_background
from flexinfer_registry.app import create_app
from flexinfer_registry.settings import RegistrySettings
from flexinfer_transfer import (
    LoadContext,
    LoadReport,
    ReaderSettings,
    StrategyParts,
    TransferMetrics,
    create_selector,
    create_strategy_chain,
)
from flexinfer_transfer.directory import RemoteTensor, SourceManifest
from flexinfer_transfer.discovery import discover_tensors
from flexinfer_transfer.k8s_service_directory import K8sServiceDirectory, K8sServiceSettings
from flexinfer_transfer.nixl_manager import NixlSettings, NixlTransferManager
from flexinfer_transfer.nixl_transport import NixlTransport, Progress
from flexinfer_transfer.registry_directory import RegistryDirectory
from flexinfer_transfer.testing import ModuleTarget
from flexinfer_transfer.testing_nixl import PeerModel, identity, seeded
from flexinfer_transfer.worker_service import ServedWorker, serve_worker

MODEL = "org/peer-model"


@pytest.fixture
async def registry(tmp_path: Path) -> AsyncIterator[str]:
    """The registry's gRPC address (in-process, memory store)."""
    settings = RegistrySettings(port=0, grpc_port=0, cache_dir=tmp_path / "cache")
    app: Any = create_app(settings)
    async with serve_in_background(app):
        yield str(app.state.grpc_address)


class Donor:
    """A donor process (flexinfer_transfer.testing_nixl)."""

    def __init__(self, registry: str, worker_id: str, seed: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "flexinfer_transfer.testing_nixl", "--registry", registry,
             "--model", MODEL, "--worker-id", worker_id, "--seed", str(seed)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        seen = []
        for line in self.proc.stdout:  # until published, or EOF if it died (NIXL logs too)
            seen.append(line)
            if line.startswith("READY "):
                self.mx_source_id = line.split()[1]
                return
        self.proc.communicate(timeout=30)
        raise AssertionError(f"donor did not start: {''.join(seen)}")

    def stop(self) -> str:
        """Close stdin; the donor marks itself STALE and reports its notifications."""
        out, _ = self.proc.communicate(timeout=30)
        return out

    def kill(self) -> None:
        """SIGKILL: the donor vanishes without a word (a crashed or preempted pod)."""
        self.proc.kill()
        self.proc.communicate(timeout=30)  # reaps it and closes the pipes


async def _start(registry: str, worker_id: str, seed: int) -> Donor:
    return await asyncio.to_thread(Donor, registry, worker_id, seed)


def _pull(
    registry: str, model_dir: Path, progress: Progress | None = None
) -> tuple[LoadReport, ModuleTarget, CollectorRegistry]:
    target = ModuleTarget(PeerModel, seeded(PeerModel(), 999))
    metrics = CollectorRegistry()
    counters = TransferMetrics(metrics)
    transport = NixlTransport(
        NixlTransferManager("target-0", NixlSettings(transfer_timeout_s=10)),
        RegistryDirectory(registry),
        target,
        batch_bytes=4096,  # several READs, so a donor can die between them
        progress=progress,
        metrics=counters,
    )
    parts = StrategyParts(counters, create_selector("random"), ReaderSettings(), transport)
    ctx = LoadContext(model_dir, accelerator="cpu", model_name=MODEL, target=target)
    return create_strategy_chain(["rdma", "default"], parts).run(ctx), target, metrics


def _same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert sorted(got) == sorted(want)
    for name, tensor in want.items():
        assert torch.equal(got[name], tensor), name


async def test_receiver_pulls_every_tensor_from_a_donor_process(
    registry: str, tmp_path: Path
) -> None:
    donor = await _start(registry, "donor-a", seed=7)
    try:
        report, target, metrics = await asyncio.to_thread(_pull, registry, tmp_path)
    finally:
        out = await asyncio.to_thread(donor.stop)
    assert report.strategy == "rdma"
    assert report.source == f"{donor.mx_source_id}/donor-a"
    want = seeded(PeerModel(), 7).state_dict()
    _same(report.tensors, want)
    _same(dict(target.module.state_dict()), want)
    # Tied weights stay tied, and the non-persistent buffer came across too.
    module = target.module
    assert isinstance(module, PeerModel)
    assert module.head.weight.data_ptr() == module.embed.weight.data_ptr()
    assert torch.equal(module.get_buffer("rope"), seeded(PeerModel(), 7).get_buffer("rope"))
    assert "NOTIFIED 1" in out  # the last READ's notification reached the donor
    sent = sum(e.size for e in discover_tensors(module))
    assert metrics.get_sample_value("mx_p2p_transfer_bytes_total", {"transport": "nixl"}) == sent


async def test_a_donor_killed_mid_transfer_falls_back_to_files(
    registry: str, tmp_path: Path
) -> None:
    files = seeded(PeerModel(), 3).state_dict()
    files.pop("head.weight")  # tied to embed.weight; safetensors stores it once
    save_file({k: v.contiguous() for k, v in files.items()}, tmp_path / "model.safetensors")
    donor = await _start(registry, "donor-doomed", seed=7)
    batches: list[int] = []

    def kill_after_first_batch(done: int, total: int) -> None:
        batches.append(done)
        if len(batches) == 1:
            assert done < total
            donor.kill()

    started = time.monotonic()
    report, target, metrics = await asyncio.to_thread(
        _pull, registry, tmp_path, kill_after_first_batch
    )
    assert report.strategy == "default", report.skipped
    assert "SourceTransferError" in report.skipped[0]
    assert "NIXL_ERR_REMOTE_DISCONNECT" in report.skipped[0]  # the dead donor, nothing else
    assert len(batches) == 1  # it died after the first READ; no later batch completed
    _same({k: v for k, v in report.tensors.items() if k in files}, files)
    assert target.reinitialized == 1  # the half-written target was replaced
    assert time.monotonic() - started < 30
    failures = metrics.get_sample_value(
        "mx_p2p_strategy_fallbacks_total", {"strategy": "rdma", "reason": "failed"}
    )
    assert failures == 1


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _k8s_pull(pattern: str, model_dir: Path, **settings: Any) -> tuple[LoadReport, ModuleTarget]:
    target = ModuleTarget(PeerModel, seeded(PeerModel(), 999))
    directory = K8sServiceDirectory(
        identity(MODEL), K8sServiceSettings(k8s_service_pattern=pattern, **settings)
    )
    manager = NixlTransferManager("target-k8s", NixlSettings(listen_port=_free_port()))
    transport = NixlTransport(manager, directory, target)
    parts = StrategyParts(
        TransferMetrics(CollectorRegistry()), create_selector("random"), ReaderSettings(), transport
    )
    ctx = LoadContext(model_dir, accelerator="cpu", model_name=MODEL, target=target)
    return create_strategy_chain(["rdma", "default"], parts).run(ctx), target


def test_k8s_service_backend_pulls_through_the_worker_service(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "flexinfer_transfer.testing_nixl", "--model", MODEL,
         "--worker-id", "pod-a", "--seed", "11", "--listen-port", str(_free_port())],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        port = next(int(line.split()[1]) for line in proc.stdout if line.startswith("SERVING "))
        # A bare host gets :{MX_WORKER_GRPC_PORT + rank} appended, as in ModelExpress.
        report, _ = _k8s_pull("127.0.0.1", tmp_path, worker_grpc_port=port)
    finally:
        out, _ = proc.communicate(timeout=30)
    assert report.strategy == "rdma"
    assert report.source == f"{identity(MODEL).mx_source_id}/"
    _same(report.tensors, seeded(PeerModel(), 11).state_dict())
    assert "NOTIFIED 1" in out


def test_k8s_service_retries_a_pod_of_another_revision_then_falls_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    save_file({"embed.weight": torch.zeros(96, 64)}, tmp_path / "model.safetensors")
    other = identity("org/another-revision")
    manifest = SourceManifest("agent-x", b"", [RemoteTensor("embed.weight", 1, 8)])
    server, port = serve_worker(ServedWorker(other.mx_source_id, "pod-b", 0, manifest), "127.0.0.1")
    try:
        report, _ = _k8s_pull(f"127.0.0.1:{port}", tmp_path, k8s_source_retries=2,
                              k8s_source_backoff_seconds=0.01)  # fmt: skip
    finally:
        server.stop(None)
    assert report.strategy == "default"
    assert "no pod served" in report.skipped[0]
    retries = [r for r in caplog.records if "retrying on a fresh channel" in r.getMessage()]
    assert len(retries) == 2  # 3 tries in all, then the next strategy


def test_k8s_service_endpoint_rules() -> None:
    directory = K8sServiceDirectory(identity(MODEL), K8sServiceSettings())
    assert directory.endpoint(2) == "mx-sources:6557"
    directory.settings.k8s_service_pattern = "mx-rank-{rank}.ns.svc:7000"
    assert directory.endpoint(3) == "mx-rank-3.ns.svc:7000"


def test_an_incompatible_accelerator_found_after_the_fetch_reads_nothing(tmp_path: Path) -> None:
    save_file({"embed.weight": torch.zeros(96, 64)}, tmp_path / "model.safetensors")
    manifest = SourceManifest("agent-x", b"", [RemoteTensor("embed.weight", 1, 8)], "xpu")
    served = ServedWorker(identity(MODEL).mx_source_id, "pod-x", 0, manifest)
    server, port = serve_worker(served, "127.0.0.1")
    try:
        report, target = _k8s_pull(f"127.0.0.1:{port}", tmp_path)
    finally:
        server.stop(None)
    assert report.strategy == "default"
    assert "source accelerator 'xpu' cannot serve a 'cpu' worker" in report.skipped[0]
    assert target.reinitialized == 0  # refused before anything was written


async def test_a_dead_donor_still_listed_ready_falls_back_fast(
    registry: str, tmp_path: Path
) -> None:
    files = {k: v.contiguous() for k, v in seeded(PeerModel(), 3).state_dict().items()}
    files.pop("head.weight")
    save_file(files, tmp_path / "model.safetensors")
    donor = await _start(registry, "donor-dead", seed=7)
    donor.kill()  # its READY record stays fresh for the reaper's 90 s (ModelExpress #484)
    started = time.monotonic()
    report, target, _ = await asyncio.to_thread(_pull, registry, tmp_path)
    assert report.strategy == "default"
    # UCX cannot reach the dead process: refused at connect, before anything was written.
    assert "donor-dead" in report.skipped[0]
    assert "loading the peer's NIXL metadata failed" in report.skipped[0]
    assert target.reinitialized == 0
    assert time.monotonic() - started < 15  # the 10 s transfer deadline at most
