"""The POSIX reader's cold path: O_DIRECT for chunks the page cache lacks, buffered reads
for the rest, on real files evicted from the page cache (posix_fadvise, no root needed)."""

from __future__ import annotations

import mmap
import os
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from flexinfer_common.errors import PermanentError
from flexinfer_transfer import ReaderSettings, read_safetensors
from flexinfer_transfer.direct_reads import (
    ALIGN,
    POPULATE_STEP,
    Prefaulter,
    align_up,
    cached,
    open_direct,
    read_direct,
)
from flexinfer_transfer.posix_reader import open_file, pread_exact

pytestmark = pytest.mark.skipif(not hasattr(os, "O_DIRECT"), reason="no O_DIRECT here")


def _checkpoint(path: Path, count: int = 40) -> dict[str, torch.Tensor]:
    """Long names push the header past 4 KiB, so the data starts unaligned; odd shapes
    leave the file's end unaligned."""
    gen = torch.Generator().manual_seed(7)
    tensors = {
        f"model.layers.{i}.some.rather.long.parameter.name.weight": torch.randn(
            37 + i, 129, generator=gen
        ).to(torch.bfloat16 if i % 2 else torch.float32)
        for i in range(count)
    }
    save_file(tensors, path)
    return tensors


def read_header_start(path: Path) -> int:
    """Where the file's tensor data starts (after the 8-byte length and the header)."""
    return 8 + int.from_bytes(path.read_bytes()[:8], "little")


def _evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _is_cached(path: Path, offset: int) -> bool:
    fd = open_file(path)
    try:
        return cached(fd, memoryview(bytearray(ALIGN)), offset)
    finally:
        os.close(fd)


def _probes_cold(path: Path, fd: int, view: memoryview, offset: int) -> bool:
    """Whether ``cached`` calls the range cold, evicting the file again between tries.

    The probe's own miss starts a readahead of that page. On a fast disk that read can end
    before the probe looks again, and then the page is truly cached (about 1 probe in 300
    on these machines): a later try, on a file evicted anew, tells a true miss."""
    for _ in range(3):
        if not cached(fd, view, offset):
            return True
        _evict(path)
    return False


def _evicted(path: Path) -> Path:
    _evict(path)
    middle = align_up(path.stat().st_size // 2)
    fd = open_file(path)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # the probe's miss reads one page
        cold = _probes_cold(path, fd, memoryview(bytearray(ALIGN)), middle)
        # Wait for that read: a page still under I/O survives the eviction below and
        # would turn up cached later.
        os.pread(fd, ALIGN, middle)
    finally:
        os.close(fd)
    if not cold or open_direct(path) is None:
        pytest.skip(f"{path.parent} cannot be evicted or read with O_DIRECT (tmpfs?)")
    _evict(path)
    return path


def _assert_same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert sorted(got) == sorted(want)
    for key, tensor in want.items():
        assert got[key].dtype == tensor.dtype, key
        assert torch.equal(got[key], tensor), key


@pytest.mark.parametrize("chunk", [ALIGN, 3 * ALIGN + 100, 1 << 20])
def test_cold_file_is_read_directly_and_exactly(tmp_path: Path, chunk: int) -> None:
    path = tmp_path / "model.safetensors"
    want = _checkpoint(path)
    assert path.stat().st_size % ALIGN  # an unaligned tail
    assert read_header_start(path) % ALIGN  # unaligned data
    _evicted(path)
    got = read_safetensors([path], ReaderSettings(threads=2, chunk_bytes=chunk, direct=True))
    if chunk >= 64 * ALIGN:
        # O_DIRECT bypassed the page cache: the middle of the file is still not cached.
        # (With tiny chunks, each 4 KiB probe's few pages of readahead cover the next ones.)
        assert not _is_cached(path, align_up(path.stat().st_size // 2))
    _assert_same(got, want)
    _assert_same(got, load_file(path))


def test_buffered_setting_fills_the_page_cache(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    want = _checkpoint(path)
    _evicted(path)
    got = read_safetensors([path], ReaderSettings(chunk_bytes=ALIGN, direct=False))
    _assert_same(got, want)
    assert _is_cached(path, align_up(path.stat().st_size // 2))


def test_partly_cached_file_mixes_both_paths(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    want = _checkpoint(path)
    _evicted(path)
    half = align_up(path.stat().st_size // 2)
    with path.open("rb", buffering=0) as handle:
        handle.seek(half)
        handle.read(4 * ALIGN)  # a cached island in the middle of a cold file
    got = read_safetensors([path], ReaderSettings(threads=3, chunk_bytes=2 * ALIGN, direct=True))
    _assert_same(got, want)


def test_read_direct_stops_at_the_end_of_the_file(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    data = os.urandom(5 * ALIGN + 123)
    path.write_bytes(data)
    _evicted(path)
    fd = open_direct(path)
    assert fd is not None
    buffer = mmap.mmap(-1, 8 * ALIGN)
    try:
        view = memoryview(buffer)
        # Asked for more than the file holds: it gets what is there, unaligned tail included.
        assert read_direct(fd, view, 0, 6 * ALIGN) == len(data)
        assert bytes(view[: len(data)]) == data
        assert read_direct(fd, view[ALIGN:], 2 * ALIGN, 2 * ALIGN) == 2 * ALIGN
        assert bytes(view[ALIGN : 3 * ALIGN]) == data[2 * ALIGN : 4 * ALIGN]
        # Refused up front: an unaligned offset, a view too short for the rounded length.
        assert read_direct(fd, view, 100, ALIGN) == 0
        assert read_direct(fd, view[: ALIGN - 1], 0, ALIGN - 1) == 0
        del view
    finally:
        os.close(fd)
        buffer.close()


def test_read_direct_gives_way_where_the_kernel_refuses(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    path.write_bytes(os.urandom(2 * ALIGN))
    _evicted(path)
    fd = open_direct(path)
    assert fd is not None
    try:
        # A buffer address off the block size: the kernel answers EINVAL, read_direct 0,
        # and the buffered read that follows in read_chunk does the work.
        unaligned = memoryview(bytearray(4 * ALIGN))[1:]
        assert read_direct(fd, unaligned, 0, ALIGN) == 0
    finally:
        os.close(fd)


def test_a_file_shorter_than_its_header_says_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    path.write_bytes(os.urandom(3 * ALIGN))
    _evicted(path)
    direct, buffered = open_direct(path), open_file(path)
    assert direct is not None
    buffer = mmap.mmap(-1, 6 * ALIGN)
    try:
        view = memoryview(buffer)
        done = read_direct(direct, view, 0, 5 * ALIGN)
        assert done == 3 * ALIGN
        with pytest.raises(PermanentError, match="shrank"):
            pread_exact(buffered, view[done : 5 * ALIGN], done)
        del view
    finally:
        os.close(direct)
        os.close(buffered)
        buffer.close()


def test_cached_probe(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    data = os.urandom(64 * ALIGN)
    path.write_bytes(data)
    _evicted(path)
    fd = open_file(path)
    try:
        page = bytearray(ALIGN)
        assert _probes_cold(path, fd, memoryview(page), 32 * ALIGN)
        assert cached(fd, memoryview(page)[:0], 32 * ALIGN)  # nothing to ask for
        os.pread(fd, ALIGN, 40 * ALIGN)
        assert cached(fd, memoryview(page), 40 * ALIGN)
        assert bytes(page) == data[40 * ALIGN : 41 * ALIGN]  # the probe's page is kept
        # A range is judged by its last page (a header read caches a file's first pages).
        chunk = bytearray(8 * ALIGN)
        assert cached(fd, memoryview(chunk), 33 * ALIGN)
        assert bytes(chunk[7 * ALIGN :]) == data[40 * ALIGN : 41 * ALIGN]
        assert _probes_cold(path, fd, memoryview(chunk), 40 * ALIGN)
    finally:
        os.close(fd)


def test_cached_and_evicted_files_in_one_load(tmp_path: Path) -> None:
    warm, cold = tmp_path / "warm.safetensors", tmp_path / "cold.safetensors"
    want = _checkpoint(warm, count=8)
    other = {f"other.{k}": v + 1 for k, v in _checkpoint(cold, count=8).items()}
    save_file(other, cold)
    _evicted(cold)
    warm.read_bytes()  # cached: read by the interleaved threads; cold by the prefaulted path
    got = read_safetensors([warm, cold], ReaderSettings(threads=2, chunk_bytes=3 * ALIGN))
    _assert_same(got, want | other)


def _rss_of(address: int) -> int:
    """Resident bytes of the mapping holding ``address``, from /proc/self/smaps."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and ":" not in head:
            low, high = (int(part, 16) for part in head.split("-"))
            inside = low <= address < high
        elif inside and head == "Rss:":
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="no /proc/self/smaps")
def test_prefaulter_faults_buffers_in_ahead() -> None:
    size = 3 * POPULATE_STEP + ALIGN
    region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    address = torch.frombuffer(region, dtype=torch.uint8).data_ptr()
    assert _rss_of(address) < size
    with Prefaulter([region]):
        deadline = time.monotonic() + 10
        while _rss_of(address) < size and time.monotonic() < deadline:
            time.sleep(0.01)
    assert _rss_of(address) >= size
    assert bytes(region[:16]) == bytes(16)  # faulted in, still zero
