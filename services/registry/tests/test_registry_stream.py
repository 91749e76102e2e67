"""StreamModelFiles end to end: hand-encoded FileChunks, reads into them, the client's decoding."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import modelexpress.model_pb2 as mx_model
import modelexpress.model_pb2_grpc as mx_model_grpc
import pytest

import flexinfer_registry.core.files as core_files
from flexinfer_common.errors import PermanentError
from flexinfer_common.serving import serve_in_background
from flexinfer_registry.app import create_app
from flexinfer_registry.client.mx_client import STREAM_FILES, MxClient, OperationFailedError
from flexinfer_registry.core.files import Chunk
from flexinfer_registry.server.chunks import encode_file_chunk, passthrough
from flexinfer_registry.settings import RegistrySettings
from flexinfer_registry.testing.fakes import COMMIT, OneProvider, ScriptedProvider

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
async def address(tmp_path: Path) -> AsyncIterator[str]:
    """A registry serving FILES."""
    settings = RegistrySettings(port=0, grpc_port=0, cache_dir=tmp_path / "cache")
    app: Any = create_app(settings, providers=OneProvider(ScriptedProvider(FILES)))
    async with serve_in_background(app):
        yield str(app.state.grpc_address)


async def test_stream_carries_every_file_in_order_with_its_fields(address: str) -> None:
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


def download_with_mx_client(
    address: str, root: Path, chunk_size: int | None = None
) -> list[str | None]:
    """Write every streamed chunk's data view at its offset; the commit hashes seen."""
    commits: list[str | None] = []
    with MxClient(address) as client:
        updates = list(client.ensure("org/w", 0, None, ignore_weights=False))
        assert updates[-1]["status"] == "DOWNLOADED"
        for chunk in client.stream("org/w", 0, None, chunk_size=chunk_size):
            assert isinstance(chunk.data, memoryview)  # a view of the receive buffer
            target = root / chunk.relative_path
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("r+b" if target.exists() else "wb") as out:
                out.seek(chunk.offset)
                out.write(chunk.data)
            commits.append(chunk.commit_hash)
    return commits


@pytest.mark.parametrize(("chunk_size", "chunks"), [(None, 5), (1 << 19, 8)])
async def test_mx_client_stream_writes_identical_files(
    tmp_path: Path, chunk_size: int | None, chunks: int
) -> None:
    files = {"w/big.bin": os.urandom((5 << 19) + 3), "empty": b"", "c.json": b"{}"}
    settings = RegistrySettings(port=0, grpc_port=0, cache_dir=tmp_path / "cache")
    app: Any = create_app(settings, providers=OneProvider(ScriptedProvider(files)))
    async with serve_in_background(app):
        commits = await asyncio.to_thread(
            download_with_mx_client, str(app.state.grpc_address), tmp_path / "out", chunk_size
        )
    assert commits == [COMMIT] + [None] * (len(commits) - 1)
    # 1 MiB chunks (the default): 3 for big.bin, 1 each for the others; 512 KiB: 6 + 1 + 1.
    assert len(commits) == chunks
    for name, data in files.items():
        assert (tmp_path / "out" / name).read_bytes() == data


async def test_mx_client_reports_a_malformed_chunk_and_cancels() -> None:
    """A server sending a FileChunk that is not valid protobuf: a readable error, no hang."""
    cancelled = threading.Event()

    async def stream(request: Any, context: Any) -> AsyncIterator[bytes]:
        yield encode_file_chunk(Chunk("a", b"ok", 0, 4, False, False, COMMIT))
        yield b"\x0a\x01a\x12\x09ok"  # data claims 9 bytes, 2 follow
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    handler = grpc.unary_stream_rpc_method_handler(
        stream,
        request_deserializer=mx_model.ModelFilesRequest.FromString,
        response_serializer=passthrough,
    )
    service, method = STREAM_FILES.strip("/").split("/")
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service, {method: handler}),)
    )
    address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    await server.start()
    received: list[bytes] = []

    def consume() -> tuple[str, bool]:
        with MxClient(address) as client:
            try:
                for chunk in client.stream("org/m", 0, None):
                    received.append(bytes(chunk.data))
            except OperationFailedError as exc:
                # The channel is open and exc's traceback holds the call: only the client's
                # own cancel can stop the server's stream here.
                return str(exc), cancelled.wait(5)
        raise AssertionError("the malformed chunk went unnoticed")

    try:
        error, server_cancelled = await asyncio.to_thread(consume)
    finally:
        await server.stop(None)
    assert error.startswith(f"the registry at {address} sent a malformed FileChunk: field 2")
    assert received == [b"ok"]
    assert server_cancelled


async def test_cached_pages_are_read_on_the_loop_and_the_rest_in_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "w.bin"
    data = os.urandom(3 << 20)
    path.write_bytes(data)
    hops: list[object] = []

    async def counting_to_thread(fn: Any, /, *args: Any) -> Any:
        hops.append(fn)
        return fn(*args)

    monkeypatch.setattr(asyncio, "to_thread", counting_to_thread)
    fd = os.open(path, os.O_RDONLY)
    try:
        buffer = bytearray(len(data))
        assert await core_files._read(fd, memoryview(buffer), 0) == len(data)
        assert buffer == data
        assert hops == []  # just written: all in the page cache, no thread hop
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        try:
            os.preadv(fd, [bytearray(4096)], 0, os.RWF_NOWAIT)
            pytest.skip("this filesystem kept the pages cached or ignores RWF_NOWAIT")
        except BlockingIOError:
            pass
        buffer[:] = bytes(len(data))
        assert await core_files._read(fd, memoryview(buffer), 0) == len(data)
        assert buffer == data
        assert hops == [core_files._pread_into]
    finally:
        os.close(fd)


async def test_a_file_cut_short_while_streaming_fails_the_stream(tmp_path: Path) -> None:
    big = os.urandom(3 << 20)
    settings = RegistrySettings(port=0, grpc_port=0, cache_dir=tmp_path / "cache")
    app: Any = create_app(settings, providers=OneProvider(ScriptedProvider({"w.bin": big})))
    async with serve_in_background(app):
        address = str(app.state.grpc_address)

        def ensure() -> list[dict[str, Any]]:
            with MxClient(address) as client:
                return list(client.ensure("org/w", 0, None, False))

        ensured = await asyncio.to_thread(ensure)
        assert ensured[-1]["status"] == "DOWNLOADED"
        files = app.state.core.files
        model = await files.find("org/w", None, False)
        chunks = files.stream(model, files.select(model, [], False), 1 << 20)
        first = await anext(chunks)
        buffer = memoryview(bytearray(first.header.size))
        await first.read_into(buffer)
        assert buffer == big[: 1 << 20]
        os.truncate(model.path_of("w.bin"), (1 << 20) + 5)  # mid-way through the second chunk
        second = await anext(chunks)
        with pytest.raises(PermanentError, match=r"w\.bin changed size on disk while being served"):
            await second.read_into(memoryview(bytearray(second.header.size)))
        await chunks.aclose()
