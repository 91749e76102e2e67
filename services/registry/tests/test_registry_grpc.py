"""Every ModelService and P2pService RPC through the modelexpress package's own stubs/clients."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import modelexpress.model_pb2 as mx_model
import modelexpress.model_pb2_grpc as mx_model_grpc
import modelexpress.p2p_pb2 as mx_p2p
import modelexpress.p2p_pb2_grpc as mx_p2p_grpc
import pytest
from modelexpress.client import MxClient
from modelexpress.metadata.source_id import compute_mx_source_id
from modelexpress.model_client import ModelCacheClient

from flexinfer_common.serving import serve_in_background
from flexinfer_registry.app import create_app
from flexinfer_registry.settings import RegistrySettings
from flexinfer_registry.testing.fakes import COMMIT, OneProvider, ScriptedProvider

FILES = {
    "config.json": b'{"a": 1}',
    "model.safetensors": bytes(range(256)) * 9000,  # 2.3 MB: three 1 MiB chunks
    "sub/tokenizer.json": b"{}",
    "empty.txt": b"",
}


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[tuple[str, ScriptedProvider]]:
    """A registry with the scripted provider: (gRPC address, provider)."""
    provider = ScriptedProvider(FILES)
    settings = RegistrySettings(port=0, grpc_port=0, cache_dir=tmp_path / "cache")
    app: Any = create_app(settings, providers=OneProvider(provider))
    async with serve_in_background(app):
        yield str(app.state.grpc_address), provider


async def _ensure(stub: Any, name: str, **kw: Any) -> list[Any]:
    request = mx_model.ModelDownloadRequest(model_name=name, **kw)
    return [u async for u in stub.EnsureModelDownloaded(request)]


async def test_model_service_rpcs(server: tuple[str, ScriptedProvider]) -> None:
    address, provider = server
    async with grpc.aio.insecure_channel(address) as channel:
        stub = mx_model_grpc.ModelServiceStub(channel)
        updates = await _ensure(stub, "org/model")
        assert updates[-1].status == mx_model.DOWNLOADED
        assert updates[-1].resolved_revision == COMMIT
        assert all(u.model_name == "org/model" for u in updates)
        again = await _ensure(stub, "org/model")
        assert [u.status for u in again] == [mx_model.DOWNLOADED]
        assert provider.downloads == 1

        listing = await stub.ListModelFiles(mx_model.ModelFilesRequest(model_name="org/model"))
        sizes = {f.relative_path: f.size for f in listing.files}
        assert sizes == {p: len(d) for p, d in FILES.items()}
        assert listing.total_size == sum(sizes.values())

        chunks = [
            c
            async for c in stub.StreamModelFiles(mx_model.ModelFilesRequest(model_name="org/model"))
        ]
        assert chunks[0].commit_hash == COMMIT
        assert max(len(c.data) for c in chunks) == 1024 * 1024
        got: dict[str, bytes] = {}
        for chunk in chunks:
            assert chunk.offset == len(got.get(chunk.relative_path, b""))
            got[chunk.relative_path] = got.get(chunk.relative_path, b"") + chunk.data
        assert got == FILES
        assert chunks[-1].is_last_file
        assert sum(c.is_last_file for c in chunks) == 1

        small = mx_model.ModelFilesRequest(
            model_name="org/model",
            chunk_size=4096,
            file_selector=mx_model.ModelFileSelector(
                paths=["sub/tokenizer.json", "model.safetensors"]
            ),
        )
        picked = [c async for c in stub.StreamModelFiles(small)]
        assert picked[0].relative_path == "sub/tokenizer.json"
        assert max(len(c.data) for c in picked) == 4096
        no_weights = mx_model.ModelFilesRequest(model_name="org/model", ignore_weights=True)
        names = {c.relative_path async for c in stub.StreamModelFiles(no_weights)}
        assert "model.safetensors" not in names

        deleted = await stub.DeleteModel(mx_model.DeleteModelRequest(model_name="org/model"))
        assert deleted.success
        again_deleted = await stub.DeleteModel(mx_model.DeleteModelRequest(model_name="org/model"))
        assert not again_deleted.success
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.ListModelFiles(mx_model.ModelFilesRequest(model_name="org/model"))
        assert info.value.code() == grpc.StatusCode.NOT_FOUND


async def test_modelexpress_cache_client(server: tuple[str, ScriptedProvider]) -> None:
    """The package's own synchronous ModelCacheClient accepts our answers."""
    address, _ = server

    def use_client() -> tuple[str | None, dict[str, int]]:
        with ModelCacheClient(server_url=address) as client:
            revision = client.ensure_downloaded("org/other")
            return revision, client.list_files("org/other")

    revision, files = await asyncio.to_thread(use_client)
    assert revision == COMMIT
    assert files == {p: len(d) for p, d in FILES.items()}


def _identity(**kw: Any) -> Any:
    return mx_p2p.SourceIdentity(
        mx_version="0.7.0", model_name="Org/Model", tensor_parallel_size=2, dtype="BF16", **kw
    )


async def test_p2p_service_rpcs(server: tuple[str, ScriptedProvider]) -> None:
    address, _ = server
    identity = _identity(extra_parameters={"K": "V"})
    worker = mx_p2p.WorkerMetadata(
        worker_rank=1,
        nixl_metadata=b"nixl-blob",
        accelerator="cuda",
        topology={"node": "n1"},
        tensor_source=mx_p2p.TensorSourceMetadata(
            tensors=[mx_p2p.TensorDescriptor(name="w", addr=2**63 + 5, size=64, dtype="bf16")]
        ),
    )
    async with grpc.aio.insecure_channel(address) as channel:
        stub = mx_p2p_grpc.P2pServiceStub(channel)
        published = await stub.PublishMetadata(
            mx_p2p.PublishMetadataRequest(identity=identity, worker=worker, worker_id="w1")
        )
        assert published.success
        assert published.mx_source_id == compute_mx_source_id(identity)
        sid = published.mx_source_id
        ready = mx_p2p.ListSourcesRequest(
            identity=identity, status_filter=mx_p2p.SOURCE_STATUS_READY
        )
        assert list((await stub.ListSources(ready)).instances) == []
        updated = await stub.UpdateStatus(
            mx_p2p.UpdateStatusRequest(
                mx_source_id=sid,
                worker_id="w1",
                worker_rank=1,
                status=mx_p2p.SOURCE_STATUS_READY,
                source_load=0.25,
            )
        )
        assert updated.success
        (ref,) = (await stub.ListSources(ready)).instances
        assert (ref.worker_id, ref.worker_rank, ref.accelerator) == ("w1", 1, "cuda")
        assert ref.HasField("source_load")
        assert ref.source_load == 0.25
        assert ref.model_name == "Org/Model"
        assert dict(ref.topology) == {"node": "n1"}
        meta = await stub.GetMetadata(mx_p2p.GetMetadataRequest(mx_source_id=sid, worker_id="w1"))
        assert meta.found
        assert meta.worker.nixl_metadata == b"nixl-blob"
        assert meta.worker.tensor_source.tensors[0].addr == 2**63 + 5
        assert meta.worker.status == mx_p2p.SOURCE_STATUS_READY
        assert meta.identity == identity
        missing = await stub.GetMetadata(mx_p2p.GetMetadataRequest(mx_source_id=sid, worker_id="x"))
        assert not missing.found
        unknown = await stub.UpdateStatus(
            mx_p2p.UpdateStatusRequest(mx_source_id=sid, worker_id="nope", status=2)
        )
        assert not unknown.success


async def test_modelexpress_mx_client(server: tuple[str, ScriptedProvider]) -> None:
    """The package's own P2P MxClient: publish, heartbeat with load, list, fetch."""
    address, _ = server
    identity = _identity()

    def use_client() -> tuple[str, list[Any], Any]:
        client = MxClient(server_url=address)
        try:
            worker = mx_p2p.WorkerMetadata(worker_rank=0, agent_name="agent")
            sid = client.publish_metadata(identity, worker, "wid")
            client.update_status(sid, "wid", 0, mx_p2p.SOURCE_STATUS_READY, source_load=0.5)
            listed = list(client.list_sources(identity, mx_p2p.SOURCE_STATUS_READY).instances)
            return sid, listed, client.get_metadata(sid, "wid")
        finally:
            client.close()

    sid, listed, meta = await asyncio.to_thread(use_client)
    assert sid == compute_mx_source_id(identity)
    assert [(r.worker_id, r.source_load) for r in listed] == [("wid", 0.5)]
    assert meta.found
    assert meta.worker.agent_name == "agent"


async def test_token_auth(tmp_path: Path) -> None:
    settings = RegistrySettings(
        port=0,
        grpc_port=0,
        cache_dir=tmp_path,
        auth_token="s3cret",  # type: ignore[arg-type]
    )
    app: Any = create_app(settings, providers=OneProvider(ScriptedProvider(FILES)))
    async with (
        serve_in_background(app),
        grpc.aio.insecure_channel(app.state.grpc_address) as channel,
    ):
        stub = mx_model_grpc.ModelServiceStub(channel)
        request = mx_model.ModelFilesRequest(model_name="org/model")
        for metadata in ((), (("authorization", "Bearer wrong"),)):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.ListModelFiles(request, metadata=metadata)
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
            with pytest.raises(grpc.aio.AioRpcError) as streamed:
                await _ensure(stub, "org/model")
            assert streamed.value.code() == grpc.StatusCode.UNAUTHENTICATED
        good = (("authorization", "Bearer s3cret"),)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.ListModelFiles(request, metadata=good)
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
