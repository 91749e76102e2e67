"""StreamModelFiles' hand-encoded FileChunks and batched reads, checked against protobuf."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import modelexpress.model_pb2 as mx_model
import modelexpress.model_pb2_grpc as mx_model_grpc
import pytest

import flexinfer_registry.core.files as core_files
from flexinfer_common.serving import serve_in_background
from flexinfer_registry.app import create_app
from flexinfer_registry.core.files import Chunk
from flexinfer_registry.settings import RegistrySettings
from flexinfer_registry.testing.fakes import COMMIT, OneProvider, ScriptedProvider
from flexinfer_registry.wire import encode_file_chunk

BIG = os.urandom(5 * 4096 + 77)
FILES = {"a.bin": BIG, "b/empty": b"", "c.json": b"{}"}


@pytest.mark.parametrize(
    "chunk",
    [
        Chunk("a", b"xyz", 0, 3, True, True, COMMIT),
        Chunk("dir/ü.bin", memoryview(b"q" * 300), 1 << 40, (1 << 40) + 300, False, False, None),
        Chunk("e", b"", 0, 0, True, False, ""),
        Chunk("", b"", 0, 0, False, False, None),
        Chunk("p" * 200, b"\x00" * 70000, 129, 70129, True, False, None),
    ],
)
def test_encoded_chunk_is_what_protobuf_serialises(chunk: Chunk) -> None:
    message = mx_model.FileChunk(
        relative_path=chunk.relative_path,
        data=bytes(chunk.data),
        offset=chunk.offset,
        total_size=chunk.total_size,
        is_last_chunk=chunk.is_last_chunk,
        is_last_file=chunk.is_last_file,
    )
    if chunk.commit_hash is not None:
        message.commit_hash = chunk.commit_hash
    assert encode_file_chunk(chunk) == message.SerializeToString()


@pytest.fixture
async def address(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    """A registry serving FILES, reading two 4 KiB chunks per batch (so batches roll over)."""
    monkeypatch.setattr(core_files, "READ_BATCH_BYTES", 8192)
    settings = RegistrySettings(port=0, grpc_port=0, cache_dir=tmp_path / "cache")
    app: Any = create_app(settings, providers=OneProvider(ScriptedProvider(FILES)))
    async with serve_in_background(app):
        yield str(app.state.grpc_address)


async def test_stream_across_read_batches(address: str) -> None:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = mx_model_grpc.ModelServiceStub(channel)
        request = mx_model.ModelDownloadRequest(model_name="org/m")
        statuses = [u.status async for u in stub.EnsureModelDownloaded(request)]
        assert statuses[-1] == mx_model.DOWNLOADED
        for size in (4096, 3000, 1 << 20):
            files = mx_model.ModelFilesRequest(model_name="org/m", chunk_size=size)
            chunks = [c async for c in stub.StreamModelFiles(files)]
            assert chunks[0].commit_hash == COMMIT
            assert not any(c.HasField("commit_hash") for c in chunks[1:])
            got: dict[str, bytes] = {}
            for c in chunks:
                assert c.offset == len(got.get(c.relative_path, b""))
                assert c.total_size == len(FILES[c.relative_path])
                assert len(c.data) <= size
                got[c.relative_path] = got.get(c.relative_path, b"") + c.data
                assert c.is_last_chunk == (len(got[c.relative_path]) == c.total_size)
            assert got == FILES
            assert [c.is_last_file for c in chunks].count(True) == 1
            assert chunks[-1].is_last_file


async def test_sixteen_mib_chunks_pass_the_message_limits(tmp_path: Path) -> None:
    big = os.urandom(17 << 20)
    settings = RegistrySettings(port=0, grpc_port=0, cache_dir=tmp_path / "cache")
    app: Any = create_app(settings, providers=OneProvider(ScriptedProvider({"w": big})))
    options = [("grpc.max_receive_message_length", 32 << 20)]
    async with (
        serve_in_background(app),
        grpc.aio.insecure_channel(str(app.state.grpc_address), options=options) as channel,
    ):
        stub = mx_model_grpc.ModelServiceStub(channel)
        request = mx_model.ModelDownloadRequest(model_name="org/big")
        statuses = [u.status async for u in stub.EnsureModelDownloaded(request)]
        assert statuses[-1] == mx_model.DOWNLOADED
        files = mx_model.ModelFilesRequest(model_name="org/big", chunk_size=64 << 20)
        sizes = [len(c.data) async for c in stub.StreamModelFiles(files)]
        assert sizes == [16 << 20, 1 << 20]  # capped at max_chunk_size


def test_chunk_settings_must_fit_a_grpc_message() -> None:
    with pytest.raises(ValueError, match="grpc_max_message_bytes"):
        RegistrySettings(max_chunk_size=64 << 20, grpc_max_message_bytes=64 << 20)
    with pytest.raises(ValueError, match="default_chunk_size"):
        RegistrySettings(default_chunk_size=8 << 20, max_chunk_size=4 << 20)
    fits = RegistrySettings(max_chunk_size=64 << 20, grpc_max_message_bytes=65 << 20)
    assert fits.max_chunk_size == 64 << 20
