"""glibc malloc tuning for processes that move model files in large messages.

glibc serves an allocation above its mmap threshold with a fresh ``mmap`` and hands heap
memory above its trim threshold back to the kernel. The thresholds start at 128 KiB and
256 KiB and adapt only part of the way, so a gRPC stream of 1 MiB messages keeps mapping,
faulting in, zeroing and unmapping memory: in ``perf`` of a StreamModelFiles client, page
faults, page clearing and unmapping were about a fifth of its CPU. With both thresholds
raised, the buffers are reused from the heap: +35-55 % stream throughput measured
(bench/registry.py, bench/RESULTS.md).

The price is memory: up to ``trim_threshold`` bytes of freed heap stay with the process
instead of returning to the kernel. Operators who set glibc's own variables
(``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``) keep their values.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 64 << 20
"""Allocations up to 64 MiB come from the heap: above the largest gRPC message we send."""
TRIM_THRESHOLD = 256 << 20
"""Up to 256 MiB of freed heap is kept for reuse: a few dozen in-flight messages."""


def keep_large_buffers(
    mmap_threshold: int = MMAP_THRESHOLD, trim_threshold: int = TRIM_THRESHOLD
) -> bool:
    """Raise glibc's mmap and trim thresholds; False where that is not possible or wanted."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return False  # the operator chose
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) and bool(
        mallopt(_M_TRIM_THRESHOLD, trim_threshold)
    )
