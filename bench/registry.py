"""Registry benchmarks: the 100-way concurrent claim and StreamModelFiles throughput.

1. 100 concurrent EnsureModelDownloaded calls for one uncached model: how many downloads the
   provider saw start (must be 1), then p50/p99 latency of EnsureModelDownloaded for the
   now-cached model (sequential calls on one channel; goal p99 <= 5 ms on loopback).
2. StreamModelFiles of one large file at 1/4/16 MiB chunks, consumed as clients consume it
   (each chunk's data written to a file in a temp dir), by two clients: modelexpress's own
   (its stubs and channel options, the ModelCacheClient loop) and ours (``flexinfer mx``'s
   MxClient: its own HTTP/2 receive path, chunks decoded in place), each in a
   process of its own (modelexpress imports torch; ours does not). Ratios against three
   local baselines: "local copy" = the same file read in the same chunk size into Python
   bytes and written to a file in a temp dir (what a client does with the stream, minus the
   network), "page cache read" = the same read with nothing written (a memory copy), both
   with the page cache warm, and "disk read" = the same reads with the page cache bypassed
   (O_DIRECT): what reading weights a node has not
   read before costs. Goal >= 0.7x.

The registry runs in this process on its own thread and event loop (memory store), with a
counting provider that copies a generated model from a local directory; the latency and
streaming clients run in a second process.

    python bench/registry.py [--size-mb 256] [--calls 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import mmap
import multiprocessing
import os
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import grpc

from flexinfer_common.malloc import keep_large_buffers
from flexinfer_common.serving import serve_in_background
from flexinfer_registry._generated.model_express import model_pb2, model_pb2_grpc
from flexinfer_registry.adapters.providers.local import LocalProvider
from flexinfer_registry.app import create_app
from flexinfer_registry.core.providers.base import (
    DownloadResult,
    ModelProvider,
    ProgressCallback,
    ProviderConfig,
)
from flexinfer_registry.core.providers.registry import ProviderRegistry
from flexinfer_registry.settings import RegistrySettings


class CountingProvider(ModelProvider):
    """Serves ``bench/<x>`` from ``<root>/<x>`` and counts the downloads started."""

    name = "huggingface"

    def __init__(self, root: Path) -> None:
        self.root = root
        self.started = 0
        self._local = LocalProvider(ProviderConfig(file_roots=(root,)))

    async def download(
        self,
        model_name: str,
        revision: str | None,
        dest_dir: Path,
        *,
        ignore_weights: bool = False,
        progress: ProgressCallback | None = None,
    ) -> DownloadResult:
        self.started += 1
        await asyncio.sleep(0.2)  # a download that takes a while, so all 100 calls overlap it
        source = f"file://{self.root / model_name.split('/', 1)[1]}"
        return await self._local.download(
            source, revision, dest_dir, ignore_weights=ignore_weights, progress=progress
        )


@contextmanager
def registry(cache: Path, provider: CountingProvider) -> Iterator[str]:
    """Run the registry on a background thread; yields its gRPC address."""
    providers = ProviderRegistry(ProviderConfig())
    providers.register("huggingface", lambda config: provider)
    settings = RegistrySettings(port=0, grpc_port=0, cache_dir=cache)
    app = create_app(settings, providers=providers)
    ready, stop = threading.Event(), threading.Event()

    async def serve() -> None:
        async with serve_in_background(app):
            ready.set()
            await asyncio.to_thread(stop.wait)

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    thread.start()
    if not ready.wait(30):
        raise SystemExit("registry did not start")
    try:
        yield str(app.state.grpc_address)
    finally:
        stop.set()
        thread.join(10)


async def concurrent_claim(address: str, name: str, callers: int) -> list[str]:
    """``callers`` concurrent EnsureModelDownloaded calls; each caller's final status."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = model_pb2_grpc.ModelServiceStub(channel)  # type: ignore[no-untyped-call]

        async def one() -> str:
            last = -1
            async for update in stub.EnsureModelDownloaded(
                model_pb2.ModelDownloadRequest(model_name=name)
            ):
                last = update.status
            return str(model_pb2.ModelStatus.Name(last))

        return list(await asyncio.gather(*(one() for _ in range(callers))))


def cached_latency(address: str, name: str, calls: int) -> list[float]:
    """Milliseconds per EnsureModelDownloaded for a cached model (sequential, one channel)."""
    with grpc.insecure_channel(address) as channel:
        stub = model_pb2_grpc.ModelServiceStub(channel)  # type: ignore[no-untyped-call]
        request = model_pb2.ModelDownloadRequest(model_name=name)
        samples = []
        for i in range(calls + 50):
            started = time.perf_counter()
            statuses = [u.status for u in stub.EnsureModelDownloaded(request)]
            if statuses[-1] != model_pb2.DOWNLOADED:
                raise SystemExit(f"cached model not DOWNLOADED: {statuses}")
            if i >= 50:  # warm-up excluded
                samples.append((time.perf_counter() - started) * 1000)
    return samples


def stream_rate(address: str, name: str, chunk: int, client: str, dest: str) -> float:
    """MB/s streaming every file of ``name`` into ``dest`` with ``client``'s stubs/options."""
    if client == "modelexpress":
        from modelexpress import model_pb2 as mx_pb2
        from modelexpress import model_pb2_grpc as mx_grpc

        mb = 100 * 1024 * 1024  # ModelCacheClient's DEFAULT_MAX_MESSAGE_SIZE and options
        options: list[tuple[str, int]] = [
            ("grpc.max_send_message_length", mb),
            ("grpc.max_receive_message_length", mb),
            ("grpc.keepalive_time_ms", 30_000),
            ("grpc.keepalive_timeout_ms", 10_000),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
        ]
        pb2, pb2_grpc = mx_pb2, mx_grpc
    else:
        return _ours_rate(address, name, chunk, dest)
    with grpc.insecure_channel(address, options=options) as channel:
        stub = pb2_grpc.ModelServiceStub(channel)
        request = pb2.ModelFilesRequest(model_name=name, chunk_size=chunk)
        # As ModelCacheClient's sink: write each chunk's data.
        return written_rate((m.data for m in stub.StreamModelFiles(request)), dest)


def written_rate(blocks: Iterator[bytes | memoryview], dest: str) -> float:
    """MB/s of taking each of ``blocks`` and writing it to ``dest`` (then removed); the
    clock starts before the first block is asked for."""
    total = 0
    with open(dest, "wb") as sink:
        started = time.perf_counter()
        for block in blocks:
            sink.write(block)
            total += len(block)
        rate = total / (time.perf_counter() - started) / 1e6
    os.unlink(dest)
    return rate


def _ours_rate(address: str, name: str, chunk: int, dest: str) -> float:
    """``stream_rate`` for our client: ``flexinfer mx``'s MxClient, data left in place."""
    from flexinfer_registry.client.mx_client import MxClient

    keep_large_buffers()  # as `flexinfer mx` does at startup
    with MxClient(address) as client:
        views = client.stream(name, 0, None, chunk_size=chunk)
        return written_rate((view.data for view in views), dest)


@contextmanager
def sendfile_server(path: Path) -> Iterator[int]:
    """A loopback listener that sends ``path`` to each connection with ``os.sendfile``: the
    cheapest sender there is, for the plain-TCP ceiling. Yields its port."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # closed: the bench is over
                return
            with conn, path.open("rb") as source:
                size, offset = os.fstat(source.fileno()).st_size, 0
                while offset < size:
                    offset += os.sendfile(conn.fileno(), source.fileno(), offset, size - offset)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()
        thread.join(5)


def raw_tcp_rate(port: int, chunk: int, dest: str) -> float:
    """MB/s receiving the file over plain TCP into one reused ``chunk``-byte buffer, each
    block written to ``dest``: a stream with no protocol at all."""
    keep_large_buffers()

    def blocks() -> Iterator[memoryview]:
        view = memoryview(bytearray(chunk))
        with socket.create_connection(("127.0.0.1", port)) as sock:
            while received := sock.recv_into(view):
                yield view[:received]

    return written_rate(blocks(), dest)


def local_rate(path: Path, chunk: int, dest: Path | None) -> float:
    """MB/s reading ``path`` in ``chunk``-byte blocks, writing them to ``dest`` if given."""
    started = time.perf_counter()
    total = 0
    with path.open("rb") as handle, dest.open("wb") if dest else nullcontext() as sink:
        while block := handle.read(chunk):
            if sink is not None:
                sink.write(block)
            total += len(block)
    rate = total / (time.perf_counter() - started) / 1e6
    if dest is not None:
        dest.unlink()
    return rate


def disk_rate(path: Path, chunk: int) -> float | None:
    """MB/s reading ``path`` into Python bytes past the page cache (O_DIRECT); None where
    the filesystem refuses O_DIRECT (tmpfs)."""
    direct = getattr(os, "O_DIRECT", 0)
    if not direct:
        return None
    buffer = mmap.mmap(-1, chunk)  # page-aligned, as O_DIRECT requires
    view = memoryview(buffer)
    total = 0
    started = time.perf_counter()
    try:
        fd = os.open(path, os.O_RDONLY | direct)
        try:
            while size := os.readv(fd, [buffer]):
                total += len(bytes(view[:size]))
        finally:
            os.close(fd)
    except OSError:
        return None
    finally:
        view.release()
        buffer.close()
    return total / (time.perf_counter() - started) / 1e6


def streaming(
    pools: dict[str, Any], address: str, cached: Path, tmp: Path, runs: int, tcp_port: int
) -> None:
    """``runs`` interleaved rounds per chunk size: each round measures every baseline and
    client once, back to back, so a change in the machine's load hits them alike; ratios
    are taken within a round, and the medians (with their range) are printed. "plain TCP"
    (sendfile -> recv_into -> write, in the same processes) is what any network path can
    reach here: sender and receiver share the two cores the local copy has alone."""
    for chunk in (1 << 20, 4 << 20, 16 << 20):
        rounds: list[dict[str, float]] = []
        for _ in range(runs):
            cells = {
                "copy": local_rate(cached, chunk, tmp / "copy"),
                "read": local_rate(cached, chunk, None),
                "disk": disk_rate(cached, chunk) or 0.0,
            }
            for client, pool in pools.items():
                args = (address, "bench/big", chunk, client, str(tmp / "streamed"))
                cells[client] = pool.apply(stream_rate, args)
            cells["plain TCP"] = pools["ours"].apply(
                raw_tcp_rate, (tcp_port, chunk, str(tmp / "raw"))
            )
            rounds.append(cells)
        median = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
        print(f"chunk {chunk >> 20} MiB, {runs} rounds (medians): local copy "
              f"{median['copy']:.0f} MB/s, page cache read {median['read']:.0f} MB/s, "
              f"disk read {median['disk']:.0f} MB/s")  # fmt: skip
        for client in [*pools, "plain TCP"]:
            ratios = sorted(r[client] / r["copy"] for r in rounds)
            read = statistics.median(r[client] / r["read"] for r in rounds)
            disk = [r[client] / r["disk"] for r in rounds if r["disk"]]
            against_disk = f", {statistics.median(disk):.2f}x disk read" if disk else ""
            label = f"StreamModelFiles ({client} client)" if client in pools else client
            print(f"  {label}: {median[client]:.0f} MB/s = "
                  f"{statistics.median(ratios):.2f}x local copy (rounds {ratios[0]:.2f}-"
                  f"{ratios[-1]:.2f}), {read:.2f}x page cache read{against_disk}")  # fmt: skip
        ceiling = statistics.median(r["ours"] / r["plain TCP"] for r in rounds)
        print(f"  ours / plain TCP: {ceiling:.2f}x (median of rounds)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=256, help="size of the streamed file")
    parser.add_argument("--calls", type=int, default=1000, help="cached-latency samples")
    parser.add_argument("--callers", type=int, default=100, help="concurrent claimers")
    parser.add_argument("--runs", type=int, default=5, help="interleaved streaming rounds")
    args = parser.parse_args()
    keep_large_buffers()  # this process hosts the registry, whose main() does the same
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "src" / "small").mkdir(parents=True)
        (root / "src" / "small" / "config.json").write_text("{}")
        (root / "src" / "big").mkdir()
        (root / "src" / "big" / "model.safetensors").write_bytes(os.urandom(args.size_mb << 20))
        provider = CountingProvider(root / "src")
        with registry(root / "cache", provider) as address:
            finals = asyncio.run(concurrent_claim(address, "bench/small", args.callers))
            print(f"claim: {args.callers} callers, downloads started: {provider.started}, "
                  f"final statuses: {sorted(set(finals))}")  # fmt: skip
            # Clients run in another process, as real ones do: no GIL shared with the server.
            spawn = multiprocessing.get_context("spawn")
            pool = spawn.Pool(1)
            samples = pool.apply(cached_latency, (address, "bench/small", args.calls))
            q = statistics.quantiles(samples, n=100)
            print(f"cached EnsureModelDownloaded: p50 {q[49]:.2f} ms, p99 {q[98]:.2f} ms "
                  f"({len(samples)} calls)")  # fmt: skip
            asyncio.run(concurrent_claim(address, "bench/big", 1))
            cached = next((root / "cache").rglob("model.safetensors"))
            # Write the generated and cached copies back now: the kernel would otherwise do
            # it ~30 s later, in the middle of a round, and slow whichever cell it hits.
            os.sync()
            pools = {"modelexpress": pool, "ours": spawn.Pool(1)}
            with sendfile_server(cached) as tcp_port:
                streaming(pools, address, cached, root, args.runs, tcp_port)
            for each in pools.values():
                each.close()
                each.join()


if __name__ == "__main__":
    main()
