"""Flash loader settings (``FLEXINFER_FLASH_LOADER_*``): how a model is copied to tmpfs."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

MIB = 1024 * 1024

CopyMethod = Literal["auto", "copy_file_range", "sendfile", "pread"]
ReuseCheck = Literal["mtime", "sha256"]


class FlashLoadSettings(BaseSettings):
    """The flash loader (``FLEXINFER_FLASH_LOADER_*``); defaults follow the operator's
    ``DEFAULT_FLASH_LOADER_*`` variables where it has one."""

    model_config = SettingsConfigDict(env_prefix="FLEXINFER_FLASH_LOADER_", extra="ignore")

    enabled: bool = False
    """Copy the model to tmpfs before the engine starts (the operator's default is off:
    the copy costs RAM as large as the model)."""

    dest: Path = Path("/dev/shm")
    """The tmpfs the copies go to; each model gets ``<dest>/<namespace>_<name>/``."""

    concurrency: int = Field(default=4, ge=1, le=32)
    """Copy workers (threads; the copy syscalls release the GIL). 4 as in the operator:
    enough to keep a network PVC's read-ahead busy, few enough to leave the node's cores
    to the engine starting next."""

    buffer_size_kb: int = Field(default=4096, ge=32, le=16384)
    """KiB moved per copy call (the operator's 4096): large enough that syscall overhead
    is noise, small enough that the pread fallback's buffer per worker stays at 4 MiB."""

    chunk_size_mb: int = Field(default=64, ge=1, le=4096)
    """MiB per range a large file is split into, so one big shard is copied by every
    worker: a 1 GiB file becomes 16 tasks, and a task's fixed cost (two opens) is
    microseconds against the milliseconds 64 MiB take."""

    margin_mb: int = Field(default=256, ge=0)
    """MiB that must stay free on the tmpfs after the copy: tmpfs is RAM, shared with
    the engine's own shared memory (NCCL, torch workers), which fails far less clearly
    than a refused copy."""

    method: CopyMethod = "auto"
    """Copy syscall: ``auto`` tries copy_file_range, then sendfile, then pread/pwrite,
    falling back when the kernel refuses one for this pair of filesystems."""

    reuse_check: ReuseCheck = "mtime"
    """How an existing copy is judged current: ``mtime`` compares each file's size and
    mtime with the manifest (free); ``sha256`` hashes the source instead, for sources
    whose mtimes cannot be trusted (it reads the whole model)."""

    verify_integrity: bool = False
    """Check every copied file's size after the copy (the operator's verifyIntegrity)."""

    exclude: list[str] = Field(default_factory=list)
    """Glob patterns of relative paths not copied (e.g. ``*.pth`` when safetensors
    exist); ``*`` matches across ``/`` as in fnmatch."""

    fallback_to_source: bool = True
    """Local mode only: when the copy does not fit, launch from the source directory
    (a slower start beats no start); false makes it an error."""

    @property
    def buffer_bytes(self) -> int:
        """``buffer_size_kb`` in bytes."""
        return self.buffer_size_kb * 1024

    @property
    def chunk_bytes(self) -> int:
        """``chunk_size_mb`` in bytes."""
        return self.chunk_size_mb * MIB

    @property
    def margin_bytes(self) -> int:
        """``margin_mb`` in bytes."""
        return self.margin_mb * MIB
