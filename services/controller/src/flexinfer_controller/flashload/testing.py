"""Test and bench helpers: model-like directories, content digests, fixed free space."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

SHM = Path("/dev/shm")


class FixedSpace:
    """A filesystem that reports ``free`` bytes, whatever is on it."""

    def __init__(self, free: int) -> None:
        self.free = free
        self.asked: list[Path] = []

    def free_bytes(self, path: Path) -> int:
        """``free``; records the path asked about."""
        self.asked.append(path)
        return self.free


def write_random(path: Path, size: int, seed: int) -> None:
    """``size`` pseudo-random bytes (a different stream per seed), written in 1 MiB pieces."""
    path.parent.mkdir(parents=True, exist_ok=True)
    block = hashlib.shake_256(seed.to_bytes(8, "little")).digest(1 << 20)
    with path.open("wb") as handle:
        for offset in range(0, size, len(block)):
            # Rotate the block per piece, so no two pieces of a file are the same bytes.
            turn = (offset // len(block)) % len(block)
            handle.write((block[turn:] + block[:turn])[: size - offset])


def make_model(root: Path, shards: list[int], small_files: int = 3) -> Path:
    """A model-like directory: ``shards`` safetensors of these sizes, json files, a subdir."""
    root.mkdir(parents=True, exist_ok=True)
    for index, size in enumerate(shards):
        write_random(root / f"model-{index + 1:05d}-of-{len(shards):05d}.safetensors", size, index)
    (root / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}\n')
    for index in range(small_files):
        (root / "tokenizer" / f"part-{index}.json").parent.mkdir(exist_ok=True)
        (root / "tokenizer" / f"part-{index}.json").write_text(f'{{"part": {index}}}\n' * index)
    return root


def tree_digest(root: Path) -> dict[str, str]:
    """SHA-256 of every regular file under ``root`` by relative path (manifest excluded)."""
    found: dict[str, str] = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = Path(dirpath, name)
            if name == ".flexinfer-flashload.json":
                continue
            with path.open("rb") as handle:
                digest = hashlib.file_digest(handle, "sha256").hexdigest()
            found[path.relative_to(root).as_posix()] = digest
    return found


@contextlib.contextmanager
def shm_dir(needed: int) -> Iterator[Path | None]:
    """A fresh directory in ``/dev/shm`` (removed after), or None when there is none with
    ``needed`` bytes free: other programs' files in ``/dev/shm`` itself are never touched."""
    if not SHM.is_dir() or shutil.disk_usage(SHM).free < needed:
        yield None
        return
    path = Path(tempfile.mkdtemp(prefix="flexinfer-flashload-", dir=SHM))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
