"""How fast the registry server builds StreamModelFiles messages, by way of building them.

Reads one page-cached file chunk by chunk and makes each chunk a FileChunk message in
``bytes`` (what grpcio sends), three ways without the C API, against reading the chunk
into a reused buffer and building nothing (the floor: the read alone):

- ``BytesIO builder`` (shipped): the file is read into a view of an ``io.BytesIO``
  laid out as the message, and ``getvalue()`` hands the buffer over without a copy;
- ``bytearray + join``: read into one reused bytearray, then ``b"".join`` the fields;
- ``pread + join``: ``os.pread`` a new ``bytes``, then ``b"".join`` the fields.

Rounds are interleaved; the median of each is printed with its ratio to the floor.

    python bench/registry_chunks.py [--size-mb 256] [--rounds 9]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable

from flexinfer_common.malloc import keep_large_buffers
from flexinfer_registry.core.files import ChunkHeader, _pread_into
from flexinfer_registry.server.chunks import FileChunkBuilder, encoded_fields

Builder = Callable[[int, int, int], object]


def _header(chunk: int, offset: int, total: int) -> ChunkHeader:
    return ChunkHeader("model.safetensors", chunk, offset, total, False, False, None)


def ways(fd: int, chunk: int, total: int) -> dict[str, Builder]:
    """Name -> build(offset) for one chunk size."""
    buffer = memoryview(bytearray(chunk))

    def floor(offset: int, *_: int) -> object:
        return _pread_into(fd, buffer, offset)

    def builder(offset: int, *_: int) -> object:
        message = FileChunkBuilder(_header(chunk, offset, total))
        _pread_into(fd, message.data, offset)
        return message.build()

    def bytearray_join(offset: int, *_: int) -> object:
        head, tail = encoded_fields(_header(chunk, offset, total))
        _pread_into(fd, buffer, offset)
        return b"".join((head, buffer, tail))

    def pread_join(offset: int, *_: int) -> object:
        head, tail = encoded_fields(_header(chunk, offset, total))
        return b"".join((head, os.pread(fd, chunk, offset), tail))

    return {
        "read alone (floor)": floor,
        "BytesIO builder (shipped)": builder,
        "bytearray + join": bytearray_join,
        "pread + join": pread_join,
    }


def rate(build: Builder, chunk: int, total: int) -> float:
    """GB/s building every chunk of the file once."""
    started = time.perf_counter()
    for offset in range(0, total, chunk):
        build(offset, chunk, total)
    return total / (time.perf_counter() - started) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    keep_large_buffers()  # as the registry's main() does
    total = args.size_mb << 20
    with tempfile.NamedTemporaryFile() as handle:
        handle.write(os.urandom(total))
        handle.flush()
        fd = os.open(handle.name, os.O_RDONLY)
        try:
            for chunk in (1 << 20, 4 << 20, 16 << 20):
                candidates = ways(fd, chunk, total)
                rounds: dict[str, list[float]] = {name: [] for name in candidates}
                for _ in range(args.rounds):
                    for name, build in candidates.items():
                        rounds[name].append(rate(build, chunk, total))
                floor = statistics.median(rounds["read alone (floor)"])
                print(f"chunk {chunk >> 20} MiB, {args.rounds} rounds (medians):")
                for name, rates in rounds.items():
                    median = statistics.median(rates)
                    print(f"  {name:27s} {median:5.2f} GB/s = {median / floor:.2f}x the floor")
        finally:
            os.close(fd)


if __name__ == "__main__":
    main()
