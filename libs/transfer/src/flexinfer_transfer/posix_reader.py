"""Fast safetensors reading on CPU: parallel ``preadv`` into one private buffer per file,
then zero-copy tensor views into it.

Warm-cache loading is bound by the page faults of the destination memory (one per 4 KiB),
not by the copy, so each file gets exactly one anonymous mapping that several threads fill
at once (``preadv`` releases the GIL); with ``hugepages`` the mapping asks for transparent
huge pages, which cuts the faults 512-fold where the kernel grants them. A file the page
cache lacks is read by one sequential reader while a Prefaulter faults its buffer in ahead
(direct_reads). Each buffer holds its file from an aligned offset, a little of the header
included, so that ``O_DIRECT`` (optional) can read into it.
"""

from __future__ import annotations

import mmap
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from flexinfer_common.errors import NotFoundError, PermanentError
from flexinfer_transfer.direct_reads import (
    Prefaulter,
    align_down,
    align_up,
    cached,
    open_direct,
    read_direct,
)
from flexinfer_transfer.safetensors_format import Header, TensorEntry, read_header


@dataclass(frozen=True)
class ReaderSettings:
    """How the reader reads (see TransferSettings for the reasons behind the defaults)."""

    threads: int = 2
    chunk_bytes: int = 16 << 20
    hugepages: bool = False
    direct: bool = False
    prefault_cold: bool = True


COLD_CHUNK = 64 << 20
"""Bytes per read on the cold path: each return from a read waits for the GIL, which the
prefaulter's madvise holds; with 16 MiB reads one reader lost to the old path (0.97
against 1.47 GB/s), with 64 MiB it led."""


@dataclass(frozen=True)
class _Job:
    fd: int
    buffer: memoryview
    offset: int
    """File offset of ``buffer[0]``."""
    size: int
    """Bytes to read (the buffer may be longer: O_DIRECT rounds lengths up)."""
    direct_fd: int | None = None
    region: mmap.mmap | None = None


def read_safetensors(paths: list[Path], settings: ReaderSettings) -> dict[str, torch.Tensor]:
    """Every tensor of ``paths``, in private CPU memory (one buffer per file)."""
    fds: list[int] = []
    try:
        headers = []
        for path in paths:
            fds.append(open_file(path))
            headers.append(read_header(path, fds[-1]))
        bases = [align_down(h.data_start) for h in headers]
        sizes = [h.file_size - base for h, base in zip(headers, bases, strict=True)]
        regions = [allocate_region(align_up(size), settings.hugepages) for size in sizes]
        buffers = [_as_tensor(region) for region in regions]
        directs = [open_direct(path) if settings.direct else None for path in paths]
        fds.extend(fd for fd in directs if fd is not None)
        jobs = [
            _Job(fd, buf.numpy().data, base, size, direct, region)
            for fd, base, size, buf, direct, region in zip(
                fds[: len(paths)], bases, sizes, buffers, directs, regions, strict=True
            )
        ]
        fill(jobs, settings)
        return _views(headers, buffers, bases)
    finally:
        for fd in fds:
            os.close(fd)


def allocate(size: int, hugepages: bool) -> torch.Tensor:
    """A fresh private uint8 buffer of ``size`` bytes (an anonymous mapping)."""
    return _as_tensor(allocate_region(size, hugepages))


def allocate_region(size: int, hugepages: bool) -> mmap.mmap | None:
    """A fresh private anonymous mapping of ``size`` bytes (None for 0 bytes)."""
    if size == 0:
        return None
    region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hugepages and hasattr(mmap, "MADV_HUGEPAGE"):
        region.madvise(mmap.MADV_HUGEPAGE)
    return region


def _as_tensor(region: mmap.mmap | None) -> torch.Tensor:
    if region is None:
        return torch.empty(0, dtype=torch.uint8)
    # frombuffer keeps ``region`` alive for as long as any view of it lives.
    return torch.frombuffer(region, dtype=torch.uint8)


def fill(jobs: list[_Job], settings: ReaderSettings) -> None:
    """Fill every job's buffer with interleaved threads; for the files the page cache lacks
    (judged by their last page), in larger reads with a prefaulter ahead of them."""
    warm: list[_Job] = []
    cold: list[_Job] = []
    for job in jobs:
        (cold if settings.prefault_cold and not _cached(job) else warm).append(job)
    if warm:
        fill_warm(warm, settings)
    if cold:
        # Measured cold (bench/RESULTS.md, 2026-12-04 "cold loads"): the readers with a
        # prefaulter ahead beat readers that fault their own pages by about 1.3x; warm, the
        # prefaulter only adds work, hence the split.
        with Prefaulter([job.region for job in cold if job.region is not None]):
            step = max(settings.chunk_bytes, COLD_CHUNK)
            fill_warm(cold, replace(settings, chunk_bytes=step), known_cold=True)


def _cached(job: _Job) -> bool:
    return cached(job.fd, job.buffer[: job.size], job.offset)


def fill_warm(jobs: list[_Job], settings: ReaderSettings, known_cold: bool = False) -> None:
    """Fill every job's buffer from its file, in chunks spread over the threads."""
    pieces = [
        (job, start, min(start + settings.chunk_bytes, job.size))
        for job in jobs
        for start in range(0, job.size, settings.chunk_bytes)
    ]
    threads = max(1, min(settings.threads, len(pieces)))

    def work(lane: int) -> None:
        # Interleaved chunks: every thread walks the file front to back, so readahead and
        # the page cache see a near-sequential reader.
        for job, start, end in pieces[lane::threads]:
            read_chunk(job, start, end, known_cold)

    if threads == 1:
        work(0)
        return
    with ThreadPoolExecutor(threads, thread_name_prefix="flexinfer-read") as pool:
        for future in [pool.submit(work, lane) for lane in range(threads)]:
            future.result()


def read_chunk(job: _Job, start: int, end: int, known_cold: bool = False) -> None:
    """Bytes ``start:end`` of the job's buffer: O_DIRECT where the page cache lacks them
    (``known_cold``: the file was found uncached, so no probe), then a buffered read of
    whatever is left (all of it when warm)."""
    done = 0
    offset = job.offset + start
    if job.direct_fd is not None and (
        known_cold or not cached(job.fd, job.buffer[start:end], offset)
    ):
        done = read_direct(job.direct_fd, job.buffer[start:], offset, end - start)
    pread_exact(job.fd, job.buffer[start + done : end], offset + done)


def pread_exact(fd: int, view: memoryview, offset: int) -> int:
    """Fill ``view`` from ``fd`` at ``offset``; a file that ends early is an error."""
    done = 0
    while done < len(view):
        got = os.preadv(fd, [view[done:]], offset + done)
        if got == 0:
            raise PermanentError(f"file shrank while being read (at byte {offset + done})")
        done += got
    return done


def open_file(path: Path) -> int:
    """A read-only descriptor of ``path``, with clear errors."""
    try:
        return os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError as exc:
        raise NotFoundError(f"{path} does not exist") from exc
    except OSError as exc:
        raise PermanentError(f"{path}: cannot open: {exc}") from exc


def _views(
    headers: list[Header], buffers: list[torch.Tensor], bases: list[int]
) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for header, buffer, base in zip(headers, buffers, bases, strict=True):
        for entry in header.entries:
            if entry.name in tensors:
                raise PermanentError(f"{header.path}: tensor {entry.name!r} appears twice")
            tensors[entry.name] = tensor_view(buffer, entry, base)
    return tensors


def tensor_view(buffer: torch.Tensor, entry: TensorEntry, base: int) -> torch.Tensor:
    """``entry`` as a typed view of ``buffer`` (which holds the file from offset ``base``)."""
    raw = buffer[entry.start - base : entry.end - base]
    itemsize = torch.empty((), dtype=entry.dtype).element_size()
    if (entry.start - base) % itemsize:
        raw = raw.clone()  # a misaligned offset cannot be reinterpreted in place
    return raw.view(entry.dtype).view(entry.shape)
