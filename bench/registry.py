"""Registry benchmarks: the 100-way concurrent claim and StreamModelFiles throughput.

1. 100 concurrent EnsureModelDownloaded calls for one uncached model: how many downloads the
   provider saw start (must be 1), then p50/p99 latency of EnsureModelDownloaded for the
   now-cached model (sequential calls on one channel; goal p99 <= 5 ms on loopback).
2. StreamModelFiles of one large file vs reading the same file locally in 1 MB blocks
   (page cache warm for both): throughput ratio, goal >= 0.7x.

The registry runs in this process on its own thread and event loop (memory store), with a
counting provider that copies a generated model from a local directory; the latency and
streaming clients run in a second process.

    python bench/registry.py [--size-mb 256] [--calls 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc

from flexinfer_common.serving import serve_in_background
from flexinfer_registry._generated.model_express import model_pb2, model_pb2_grpc
from flexinfer_registry.app import create_app
from flexinfer_registry.core.providers.base import (
    DownloadResult,
    ModelProvider,
    ProgressCallback,
    ProviderConfig,
)
from flexinfer_registry.core.providers.local import LocalProvider
from flexinfer_registry.core.providers.registry import ProviderRegistry
from flexinfer_registry.settings import RegistrySettings


class CountingProvider(ModelProvider):
    """Serves ``bench/<x>`` from ``<root>/<x>`` and counts the downloads started."""

    name = "huggingface"

    def __init__(self, root: Path) -> None:
        self.root = root
        self.started = 0
        self._local = LocalProvider()

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


def stream_rate(address: str, name: str, chunk: int) -> tuple[float, int]:
    """(MB/s, bytes) streaming every file of ``name`` with ``chunk``-byte chunks."""
    with grpc.insecure_channel(
        address, options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)]
    ) as channel:
        stub = model_pb2_grpc.ModelServiceStub(channel)  # type: ignore[no-untyped-call]
        request = model_pb2.ModelFilesRequest(model_name=name, chunk_size=chunk)
        started = time.perf_counter()
        total = sum(len(c.data) for c in stub.StreamModelFiles(request))
        return total / (time.perf_counter() - started) / 1e6, total


def local_rate(path: Path, chunk: int = 1 << 20) -> float:
    """MB/s reading ``path`` in ``chunk``-byte blocks."""
    started = time.perf_counter()
    total = 0
    with path.open("rb") as handle:
        while block := handle.read(chunk):
            total += len(block)
    return total / (time.perf_counter() - started) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=256, help="size of the streamed file")
    parser.add_argument("--calls", type=int, default=1000, help="cached-latency samples")
    parser.add_argument("--callers", type=int, default=100, help="concurrent claimers")
    args = parser.parse_args()
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
            pool = multiprocessing.get_context("spawn").Pool(1)
            samples = pool.apply(cached_latency, (address, "bench/small", args.calls))
            q = statistics.quantiles(samples, n=100)
            print(f"cached EnsureModelDownloaded: p50 {q[49]:.2f} ms, p99 {q[98]:.2f} ms "
                  f"({len(samples)} calls)")  # fmt: skip
            asyncio.run(concurrent_claim(address, "bench/big", 1))
            cached = next((root / "cache").rglob("model.safetensors"))
            local = max(local_rate(cached) for _ in range(3))
            for chunk in (1 << 20, 4 << 20):
                runs = [pool.apply(stream_rate, (address, "bench/big", chunk)) for _ in range(3)]
                rate = max(r[0] for r in runs)
                print(f"StreamModelFiles chunk {chunk >> 20} MB: {rate:.0f} MB/s, local read "
                      f"{local:.0f} MB/s, ratio {rate / local:.2f}x")  # fmt: skip
            pool.close()
            pool.join()


if __name__ == "__main__":
    main()
