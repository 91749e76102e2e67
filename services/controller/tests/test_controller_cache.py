"""Local ensureCache for real: an s3:// Model fetched through the in-process registry from a
moto S3 server, then served; failures, a registry that is down, and a hostile registry."""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import boto3
import grpc
import httpx
import pytest
from moto.server import ThreadedMotoServer

from flexinfer_common.api import Model
from flexinfer_common.serving import serve_in_background
from flexinfer_controller.adapters.registry.settings import RegistryClientSettings
from flexinfer_controller.testing import (
    Harness,
    eventually,
    fake_model_dir,
    kill_engines,
    run_controller,
)
from flexinfer_controller.testing import model_doc as base_doc
from flexinfer_proxy.testing_stack import proxy_stack
from flexinfer_registry._generated.model_express import model_pb2, model_pb2_grpc
from flexinfer_registry.adapters.providers import builtin_providers
from flexinfer_registry.app import create_app as registry_app
from flexinfer_registry.core.providers.base import ProviderConfig
from flexinfer_registry.settings import RegistrySettings
from flexinfer_testing.faultproxy import PASS, FaultProxy, fault_proxy, stall_after
from flexinfer_testing.ports import free_port

KEY = "default/tiny"


@pytest.fixture(autouse=True)
def no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    assert kill_engines(tmp_path) == [], "a test left engines running"


@pytest.fixture(scope="module")
def moto(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A moto S3 server holding s3://bucket/models/tiny (the generated tiny model) and
    s3://bucket/models/fake (a stand-in engine's model); its endpoint URL."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    client = boto3.client(
        "s3", endpoint_url=url, aws_access_key_id="testing",
        aws_secret_access_key="testing", region_name="us-east-1",
    )  # fmt: skip
    client.create_bucket(Bucket="bucket")
    fake = fake_model_dir(tmp_path_factory.mktemp("fake") / "m")
    for prefix, directory in (("models/tiny", tiny_model_dir), ("models/fake", fake)):
        for path in sorted(directory.iterdir()):
            client.put_object(Bucket="bucket", Key=f"{prefix}/{path.name}", Body=path.read_bytes())
    client.close()
    try:
        yield url
    finally:
        server.stop()


def aws_env(endpoint: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
    }


@asynccontextmanager
async def registry(tmp_path: Path, s3: str, grpc_port: int = 0) -> AsyncIterator[str]:
    """The registry app in-process on loopback, reading S3 at ``s3``; its gRPC address."""
    settings = RegistrySettings(
        port=0, grpc_port=grpc_port, cache_dir=tmp_path / "registry", download_heartbeat_s=0.05
    )
    # 64 KiB reads: the provider's progress moves within the tiny model's 3.7 MB of weights.
    config = ProviderConfig(env=aws_env(s3), timeout_s=5.0, chunk_size=64 * 1024)
    providers = builtin_providers(config)
    app: Any = registry_app(settings, providers=providers)
    async with serve_in_background(app):
        yield str(app.state.grpc_address)


def client_settings(address: str) -> RegistryClientSettings:
    return RegistryClientSettings(address=address, retry_initial_s=0.05, retry_max_s=0.2)


def model_doc(name: str, source: str, **serverless: Any) -> dict[str, Any]:
    return base_doc(name, source, **serverless)


def cached(model: Model) -> tuple[str, str, str]:
    condition = {c.type: c for c in model.status.conditions}["Cached"]
    return condition.status, condition.reason or "", condition.message or ""


async def status_where(h: Harness, name: str, test: Any, timeout_s: float = 30.0) -> Model:
    """The stored Model once ``test(model)`` holds for a status of its current spec."""
    found: list[Model] = []

    async def check() -> bool:
        model = await h.store.get_model("default", name)
        current = model.status.observed_generation == model.metadata.generation
        if current and test(model):
            found.append(model)
        return bool(found)

    await eventually(check, timeout_s)
    return found[0]


async def test_s3_model_downloads_with_progress_then_serves(tmp_path: Path, moto: str) -> None:
    """Pending(Downloading, with a percentage) while the registry downloads, the proxy's
    cold-start comments show the download's progress, then Ready and a completion."""
    host, port = moto.removeprefix("http://").split(":")
    # The S3 connection stalls part-way through the weights: a download caught in the middle.
    with fault_proxy((host, int(port)), stall_after(1_800_000)) as s3:
        async with (
            registry(tmp_path, s3.url) as address,
            proxy_stack(tmp_path / "proxy", [], progress_interval_s=0.2) as proxy,
            run_controller(
                tmp_path, bus=proxy.bus, store=proxy.store,
                engine_python=sys.executable, registry=client_settings(address),
                engine_startup_timeout_s=120.0,
            ) as h,
        ):  # fmt: skip
            await h.put_model(model_doc("tiny", "s3://bucket/models/tiny"))
            await eventually(lambda: proxy.core.catalog.get(KEY) is not None, 10)
            request = asyncio.create_task(_stream_completion(proxy.url))
            pending = await status_where(h, "tiny", _downloading_partway)
            assert pending.status.phase.value == "Pending"
            assert pending.status.desired_replicas == 0, "cache gate: nothing starts"
            assert cached(pending)[0] == "False"
            assert pending.status.cache is not None
            assert pending.status.cache.ready is False
            await eventually(lambda: _progress_seen(proxy.core.progress.latest(KEY)), 10)
            _release(s3)
            text = await asyncio.wait_for(request, 180)
            ready = await h.wait_phase("tiny", "Ready", timeout_s=60)
    assert re.search(r"phase=pulling progress=[1-9]\d?% bytes=\d+/\d+", text), text[:2000]
    assert "data: [DONE]" in text
    assert '"choices"' in text
    assert ready.status.cache is not None
    assert ready.status.cache.ready
    files = await asyncio.to_thread(_names, tmp_path / "data" / "models-cache" / "default_tiny")
    assert "model.safetensors" in files
    assert "config.json" in files


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def _downloading_partway(model: Model) -> bool:
    """Cached=False, reason Downloading, and a percentage strictly between 0 and 100."""
    _, reason, message = cached(model)
    found = re.search(r"\((\d+)%\)", message)
    return reason == "Downloading" and found is not None and 0 < int(found[1]) < 100


def _progress_seen(event: Any) -> bool:
    return event is not None and event.phase == "pulling" and (event.progress or 0) > 0


def _release(s3: FaultProxy) -> None:
    """Let S3 answer again; the stalled connection is dropped (the registry retries)."""
    s3.fault = PASS
    s3.drop_all()


async def _stream_completion(url: str) -> str:
    body = {"model": "tiny", "prompt": "hi", "max_tokens": 2, "stream": True}
    async with httpx.AsyncClient(timeout=180) as client:
        response = await client.post(f"{url}/v1/completions", json=body)
    assert response.status_code == 200, response.text
    return response.text


async def test_missing_object_fails_with_the_registrys_reason(tmp_path: Path, moto: str) -> None:
    async with (
        registry(tmp_path, moto) as address,
        run_controller(tmp_path, registry=client_settings(address)) as h,
    ):
        await h.put_model(model_doc("gone", "s3://bucket/models/none", minReplicas=1))
        failed = await h.wait_phase("gone", "Failed", timeout_s=30)
        status, reason, message = cached(failed)
        assert (status, reason) == ("False", "SourceNotFound")
        assert "the registry:" in message
        assert "no objects" in message
        assert failed.status.message == message


async def test_registry_down_then_up(tmp_path: Path, moto: str) -> None:
    """Pending with a reason naming the registry while it is down; Ready once it is up."""
    port = free_port()  # nothing listens there until the registry starts
    address = f"127.0.0.1:{port}"
    async with run_controller(tmp_path, registry=client_settings(address)) as h:
        await h.put_model(model_doc("fake", "s3://bucket/models/fake", minReplicas=1))
        down = await status_where(h, "fake", lambda m: cached(m)[1] == "RegistryUnavailable")
        assert down.status.phase.value == "Pending"
        assert f"cannot reach the registry at {address}" in cached(down)[2]
        async with registry(tmp_path, moto, grpc_port=port):
            await h.wait_phase("fake", "Ready", timeout_s=30)
    # A restarted controller serves the copy it has, without asking the (stopped) registry.
    async with run_controller(tmp_path, registry=client_settings(address)) as h:
        again = await h.wait_phase("fake", "Ready", timeout_s=30)
        assert "default_fake" in cached(again)[2]


class _Hostile(model_pb2_grpc.ModelServiceServicer):
    """A registry that names a file outside the model directory."""

    async def EnsureModelDownloaded(self, request: Any, context: Any) -> AsyncIterator[Any]:  # noqa: N802
        yield model_pb2.ModelStatusUpdate(
            model_name=request.model_name, status=model_pb2.DOWNLOADED
        )

    async def ListModelFiles(self, request: Any, context: Any) -> Any:  # noqa: N802
        files = [model_pb2.ModelFileInfo(relative_path="../escape.txt", size=4)]
        return model_pb2.ModelFileList(model_name=request.model_name, files=files, total_size=4)

    async def StreamModelFiles(self, request: Any, context: Any) -> AsyncIterator[Any]:  # noqa: N802
        yield model_pb2.FileChunk(
            relative_path="../escape.txt", data=b"evil", offset=0, total_size=4,
            is_last_chunk=True, is_last_file=True,
        )  # fmt: skip


async def test_hostile_file_name_is_refused(tmp_path: Path) -> None:
    server = grpc.aio.server()
    model_pb2_grpc.add_ModelServiceServicer_to_server(_Hostile(), server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with run_controller(tmp_path, registry=client_settings(f"127.0.0.1:{port}")) as h:
            await h.put_model(model_doc("evil", "s3://bucket/evil", minReplicas=1))
            failed = await h.wait_phase("evil", "Failed", timeout_s=20)
    finally:
        await server.stop(0)
    status, reason, message = cached(failed)
    assert (status, reason) == ("False", "UnsafeModelFiles")
    assert "../escape.txt" in message
    written = await asyncio.to_thread(lambda: list(tmp_path.rglob("escape.txt")))
    assert not written, "a file was written outside the cache"
