"""ListModelFiles and StreamModelFiles: serve a cached model's files, checked and chunked."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass

from flexinfer_common.errors import InvalidSpecError, NotFoundError, PermanentError
from flexinfer_registry.core.cache import CachedFile, CachedModel
from flexinfer_registry.core.context import CacheContext
from flexinfer_registry.core.paths import cache_key, check_relative_path
from flexinfer_registry.core.providers.files import is_weight_file
from flexinfer_registry.core.records import ModelStatus


@dataclass(frozen=True, slots=True)
class ChunkHeader:
    """A FileChunk's fields but its data, of which it carries ``size`` bytes."""

    relative_path: str
    size: int
    offset: int
    total_size: int
    is_last_chunk: bool
    is_last_file: bool
    commit_hash: str | None


@dataclass(frozen=True)
class Chunk:
    """One FileChunk with its data in hand."""

    relative_path: str
    data: bytes | memoryview
    offset: int
    total_size: int
    is_last_chunk: bool
    is_last_file: bool
    commit_hash: str | None

    def header(self) -> ChunkHeader:
        """The fields, with the data's size."""
        return ChunkHeader(
            self.relative_path,
            len(self.data),
            self.offset,
            self.total_size,
            self.is_last_chunk,
            self.is_last_file,
            self.commit_hash,
        )


@dataclass(frozen=True, slots=True)
class PendingChunk:
    """A chunk whose data is still in its file: ``read_into`` fetches it.

    The data is read straight into whatever buffer the caller sends from (the encoded
    message), so serving a chunk copies it once in user space. Valid until the next chunk
    is asked for: the file is closed after its last one.
    """

    header: ChunkHeader
    fd: int

    async def read_into(self, view: memoryview) -> None:
        """Fill ``view`` (``header.size`` bytes) with the chunk's data."""
        if await _read(self.fd, view, self.header.offset) != len(view):
            path = self.header.relative_path
            raise PermanentError(f"{path} changed size on disk while being served")


class ModelFiles:
    """Finds cached models and streams their files."""

    def __init__(self, context: CacheContext) -> None:
        self.store, self.cache = context.store, context.cache
        self.in_use, self.metrics, self.clock = context.in_use, context.metrics, context.clock

    async def find(self, name: str, revision: str | None, ignore_weights: bool) -> CachedModel:
        """The cached model a request names; NotFoundError when it is not downloaded.

        A metadata-only request is served from a full download too, when there is one.
        """
        keys = [cache_key(name, revision, False)]
        if ignore_weights:
            keys.append(cache_key(name, revision, True))
        for key in keys:
            record = await self.store.get(key)
            if record is None or record.status != ModelStatus.DOWNLOADED:
                continue
            model = self.cache.load_known(key) or await asyncio.to_thread(self.cache.load, key)
            if model is not None:
                await self.store.touch(key, now=self.clock())
                return model
        raise NotFoundError(
            f"model {name[:200]!r} is not in the cache; call EnsureModelDownloaded first"
        )

    def select(
        self, model: CachedModel, paths: list[str], ignore_weights: bool
    ) -> list[CachedFile]:
        """The files to serve: ``paths`` (checked, in the given order) or every file."""
        if not paths:
            return [f for f in model.files if not (ignore_weights and is_weight_file(f.path))]
        by_path = {f.path: f for f in model.files}
        chosen: list[CachedFile] = []
        seen: set[str] = set()
        for raw in paths:
            path = check_relative_path(raw)
            if path in seen:
                continue
            if path not in by_path:
                raise NotFoundError(f"model {model.name[:200]!r} has no file {raw[:200]!r}")
            seen.add(path)
            chosen.append(by_path[path])
        return chosen

    async def stream(
        self, model: CachedModel, files: list[CachedFile], chunk_size: int
    ) -> AsyncIterator[PendingChunk]:
        """Chunks of every file in order; the first carries the snapshot commit hash."""
        if chunk_size <= 0:
            raise InvalidSpecError("chunk_size must be positive", field="chunk_size")
        commit: str | None = model.snapshot
        with self.in_use.using(model.key):
            for index, item in enumerate(files):
                last_file = index == len(files) - 1
                path = model.path_of(item.path)
                flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
                fd = await asyncio.to_thread(os.open, path, flags)
                try:
                    # max(size, 1): an empty file still gets its one (empty) chunk.
                    for offset in range(0, max(item.size, 1), chunk_size):
                        size = min(chunk_size, item.size - offset)
                        end = offset + size >= item.size
                        last = end and last_file
                        header = ChunkHeader(item.path, size, offset, item.size, end, last, commit)
                        commit = None
                        self.metrics.bytes_streamed.inc(size)
                        yield PendingChunk(header, fd)
                finally:
                    os.close(fd)


async def _read(fd: int, view: memoryview, offset: int) -> int:
    """Fill ``view`` from ``fd`` at ``offset``: what the page cache holds is read on the
    event loop (a memory copy, ~70 µs per MiB), the rest in a worker thread, so a disk read
    never blocks the loop. A thread hop per read cost a fifth of the stream's throughput
    when the file was cached, as served models usually are."""
    nowait = getattr(os, "RWF_NOWAIT", 0)
    got = _pread_into(fd, view, offset, nowait) if nowait else 0
    if got < len(view):
        got += await asyncio.to_thread(_pread_into, fd, view[got:], offset + got)
    return got


def _pread_into(fd: int, view: memoryview, offset: int, flags: int = 0) -> int:
    """Fill ``view`` from ``fd`` at ``offset``; fewer bytes only at end of file, or, with
    RWF_NOWAIT in ``flags``, where the page cache stops (or the filesystem refuses it)."""
    done = 0
    while done < len(view):
        try:
            got = os.preadv(fd, [view[done:]], offset + done, flags)
        except OSError:  # EAGAIN: the rest is on disk; EOPNOTSUPP: not on this filesystem
            if not flags:
                raise
            break
        if got == 0:
            break
        done += got
    return done
