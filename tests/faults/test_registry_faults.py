"""Fault injection against real registry processes on loopback, through modelexpress's own
client: a registry SIGKILLed mid-download, and a cache disk that fills up.

Each test prints what the clients saw (``-s`` shows it): the status codes, the messages,
how long recovery took, and the registry's resident memory before and after.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import resource
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import modelexpress.model_pb2 as mx_model
import modelexpress.model_pb2_grpc as mx_model_grpc
import pytest
from google.rpc import error_details_pb2  # type: ignore[import-untyped]
from grpc_status import rpc_status  # type: ignore[import-untyped]
from modelexpress.model_client import ModelCacheClient

from flexinfer_registry.testing.process import RegistryProcess, registry_process
from flexinfer_registry.testing.provider_fixtures import FixtureState, Hold, provider_fixture

MIB = 1 << 20
NAME = "gs://weights/llama"


def _model(weights: int) -> dict[str, bytes]:
    return {
        "llama/config.json": b'{"architectures": ["LlamaForCausalLM"]}',
        "llama/model.safetensors": os.urandom(weights),
    }


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _env(root: Path, hub_url: str, store: str, cache: Path) -> dict[str, str]:
    return {
        "FLEXINFER_REGISTRY_CACHE_DIR": str(cache),
        "FLEXINFER_REGISTRY_STORE": store,
        "FLEXINFER_REGISTRY_SQL_URL": f"sqlite:///{root / 'registry.db'}",
        "FLEXINFER_REGISTRY_DOWNLOAD_HEARTBEAT_S": "0.5",
        "FLEXINFER_REGISTRY_DOWNLOAD_STALE_S": "3",
        "FLEXINFER_REGISTRY_EVICTION_ENABLED": "false",
        "STORAGE_EMULATOR_HOST": hub_url,
    }


def _stream(address: str, name: str) -> dict[str, bytes]:
    """Every file of ``name`` through modelexpress's stub."""
    got: dict[str, bytes] = {}
    with grpc.insecure_channel(address) as channel:
        stub = mx_model_grpc.ModelServiceStub(channel)
        for chunk in stub.StreamModelFiles(mx_model.ModelFilesRequest(model_name=name)):
            got[chunk.relative_path] = got.get(chunk.relative_path, b"") + chunk.data
    return got


def _code(address: str, name: str) -> grpc.StatusCode:
    """What ListModelFiles answers for ``name`` (OK when it is cached)."""
    with grpc.insecure_channel(address) as channel:
        stub = mx_model_grpc.ModelServiceStub(channel)
        try:
            stub.ListModelFiles(mx_model.ModelFilesRequest(model_name=name), timeout=10)
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def _installed_files(cache: Path) -> dict[str, int]:
    """Relative path -> size of every file in an installed model (never staging)."""
    models = cache / "models"
    found: dict[str, int] = {}
    for path in models.rglob("*") if models.is_dir() else ():
        if path.is_file() and "files" in path.relative_to(models).parts:
            found[path.name] = path.stat().st_size
    return found


def _partial_bytes(cache: Path) -> int:
    """Bytes the staging folders hold (downloads in progress)."""
    tmp = cache / ".tmp"
    return sum(p.stat().st_size for p in tmp.rglob("*") if p.is_file()) if tmp.is_dir() else 0


def _wait_until(what: str, condition: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached in {timeout} s")
        time.sleep(0.02)  # polling the condition, with a deadline


@pytest.mark.slow
@pytest.mark.parametrize("store", ["sql", "memory"])
def test_a_registry_killed_mid_download_never_serves_half_a_file(
    tmp_path: Path, store: str
) -> None:
    """SIGKILL while the weights are half downloaded, then restart on the same cache (and,
    with store=sql, the same records): the half-written file is never served; the restarted
    registry re-downloads and the real client gets the whole file, checksum-verified."""
    files = _model(24 * MIB)
    weights = files["llama/model.safetensors"]
    state = FixtureState(hold=Hold(after=8 * MIB))
    state.gcs["weights"] = files
    cache = tmp_path / "cache"
    with provider_fixture(state) as hub:
        env = _env(tmp_path, hub.url, store, cache)
        seen: dict[str, Any] = {}
        with registry_process(tmp_path / "first", env) as first:

            def ensure() -> None:
                with ModelCacheClient(server_url=first.grpc_address) as client:
                    try:
                        client.ensure_downloaded(NAME, mx_model.GCS)
                    except grpc.RpcError as exc:
                        seen["first"] = (exc.code(), exc.details())

            waiter = threading.Thread(target=ensure)
            waiter.start()
            assert state.hold is not None
            assert state.hold.reached.wait(60)
            # The first 8 MiB reached the registry; most of it is on disk (the rest may sit
            # in a write buffer): the weights are half downloaded.
            _wait_until("4 MiB on disk", lambda: _partial_bytes(cache) >= 4 * MIB)
            seen["partial_bytes"] = _partial_bytes(cache)
            seen["rss_before_kill_kib"] = first.rss_kib()
            killed_at = time.monotonic()
            first.kill()
            waiter.join(60)
            seen["client_noticed_s"] = time.monotonic() - killed_at
        state.hold.release.set()
        state.hold = None
        assert seen["first"][0] == grpc.StatusCode.UNAVAILABLE, seen
        assert _installed_files(cache) == {}, "a half download must never look installed"

        with registry_process(tmp_path / "second", env) as second:
            # Before anything is asked again: not served, never half of it.
            assert _code(second.grpc_address, NAME) == grpc.StatusCode.NOT_FOUND
            started = time.monotonic()
            with ModelCacheClient(server_url=second.grpc_address) as client:
                client.ensure_downloaded(NAME, mx_model.GCS)
                listed = client.list_files(NAME, mx_model.GCS)
            seen["recovered_s"] = time.monotonic() - started
            streamed = _stream(second.grpc_address, NAME)
            seen["rss_after_kib"] = second.rss_kib()
    config = files["llama/config.json"]
    assert (listed["config.json"], listed["model.safetensors"]) == (len(config), len(weights))
    assert _sha(streamed["model.safetensors"]) == _sha(weights)
    assert streamed["config.json"] == config
    installed = _installed_files(cache)
    assert (installed["config.json"], installed["model.safetensors"]) == (len(config), len(weights))
    print(f"\nkilled mid-download (store={store}): {seen}")


@contextlib.contextmanager
def small_disk(path: Path, size: int) -> Iterator[str]:
    """A ``size``-byte tmpfs at ``path``; yields "tmpfs" (or "rlimit" when mounting is not
    permitted here: the caller then limits the registry's file size instead)."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        yield "rlimit"
        return
    try:
        yield "tmpfs"
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _file_size_limit(size: int) -> Any:
    """preexec_fn: writes past ``size`` bytes fail with EFBIG instead of killing the process."""

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    return limit


def _ensure_status(address: str, name: str) -> tuple[list[Any], grpc.RpcError | None]:
    """EnsureModelDownloaded's updates and the call's error, through modelexpress's stub."""
    updates: list[Any] = []
    with grpc.insecure_channel(address) as channel:
        stub = mx_model_grpc.ModelServiceStub(channel)
        try:
            for update in stub.EnsureModelDownloaded(
                mx_model.ModelDownloadRequest(model_name=name, provider=mx_model.GCS)
            ):
                updates.append(update)
        except grpc.RpcError as exc:
            return updates, exc
    return updates, None


@pytest.mark.slow
def test_a_full_cache_disk_is_a_clear_error_and_leaves_no_entry(tmp_path: Path) -> None:
    """The cache on a 16 MiB tmpfs (RLIMIT_FSIZE on the registry process where mounting is
    not permitted: the same EFBIG/ENOSPC path), a 24 MiB model: the call ends with ERROR,
    then RESOURCE_EXHAUSTED with details; no file, record or staging folder is left that
    could be served, and a model that fits still downloads on the same disk."""
    state = FixtureState()
    state.gcs["weights"] = _model(24 * MIB)
    small = {"tiny/config.json": b"{}", "tiny/model.safetensors": os.urandom(2 * MIB)}
    state.gcs["weights"].update(small)
    cache = tmp_path / "disk" / "cache"
    with small_disk(tmp_path / "disk", 16 * MIB) as how, provider_fixture(state) as hub:
        env = _env(tmp_path, hub.url, "memory", cache)
        preexec = _file_size_limit(16 * MIB) if how == "rlimit" else None
        with registry_process(tmp_path / "run", env, preexec_fn=preexec) as registry:
            rss_start = registry.rss_kib()
            updates, error = _ensure_status(registry.grpc_address, NAME)
            assert updates[-1].status == mx_model.ERROR
            assert "no room" in updates[-1].message
            assert error is not None
            assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            status = rpc_status.from_call(error)
            info = error_details_pb2.ErrorInfo()
            assert status.details[0].Unpack(info)
            assert info.reason == "CACHE_FULL"
            _check_nothing_left(registry, cache)
            with ModelCacheClient(server_url=registry.grpc_address) as client:
                client.ensure_downloaded("gs://weights/tiny", mx_model.GCS)
            tiny = _stream(registry.grpc_address, "gs://weights/tiny")
            assert _sha(tiny["model.safetensors"]) == _sha(small["tiny/model.safetensors"])
            rss_end = registry.rss_kib()
    print(f"\nfull disk ({how}): updates {[(u.status, u.message) for u in updates]}, "
          f"status {error.code()} {error.details()!r}, reason {info.reason}, "
          f"RSS {rss_start} -> {rss_end} KiB")  # fmt: skip


def _check_nothing_left(registry: RegistryProcess, cache: Path) -> None:
    """No installed file, no staging bytes, an ERROR record (released claim), not served."""
    assert _installed_files(cache) == {}
    assert _partial_bytes(cache) == 0
    with httpx.Client(base_url=registry.http_url) as http:
        (record,) = http.get("/v1/registry/models").json()
    assert (record["key"], record["status"]) == (NAME, "ERROR")
    assert _code(registry.grpc_address, NAME) == grpc.StatusCode.NOT_FOUND
