"""A scripted provider for tests and benchmarks: writes given files, counts downloads.

It stands in only for the remote source (there is no internet here); the registry code
under test (claims, cache, streaming) runs for real around it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from flexinfer_registry.core.providers.base import (
    DownloadResult,
    FileInfo,
    ModelProvider,
    ProgressCallback,
    SourceUnreachableError,
)
from flexinfer_registry.core.providers.files import is_weight_file

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class ScriptedProvider(ModelProvider):
    """Downloads ``files`` (relative path -> bytes) after ``gate`` opens; may fail instead."""

    name: ClassVar[str] = "scripted"

    def __init__(
        self,
        files: Mapping[str, bytes],
        *,
        gate: asyncio.Event | None = None,
        fail: str | None = None,
        resolved_revision: str | None = COMMIT,
    ) -> None:
        self.files = dict(files)
        self.gate = gate
        self.fail = fail
        self.resolved_revision = resolved_revision
        self.downloads = 0
        self.started = asyncio.Event()

    async def download(
        self,
        model_name: str,
        revision: str | None,
        dest_dir: Path,
        *,
        ignore_weights: bool = False,
        progress: ProgressCallback | None = None,
    ) -> DownloadResult:
        """Write half of the first file, wait for the gate, then write everything."""
        self.downloads += 1
        self.started.set()
        chosen = {p: d for p, d in self.files.items() if not (ignore_weights and is_weight_file(p))}
        total = sum(len(d) for d in chosen.values())
        if chosen:
            first, data = next(iter(chosen.items()))
            _write(dest_dir, first, data[: len(data) // 2])
            if progress is not None:
                progress(len(data) // 2, total)
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise SourceUnreachableError(self.fail)
        for path, data in chosen.items():
            _write(dest_dir, path, data)
        if progress is not None:
            progress(total, total)
        infos = tuple(FileInfo(p, len(d), "size") for p, d in chosen.items())
        return DownloadResult(resolved_revision=self.resolved_revision, files=infos)


def _write(root: Path, relative: str, data: bytes) -> None:
    """Small test files: blocking writes are fine here."""
    (root / relative).parent.mkdir(parents=True, exist_ok=True)
    (root / relative).write_bytes(data)


class OneProvider:
    """A provider resolver that answers one provider for every model."""

    def __init__(self, provider: ModelProvider) -> None:
        self.provider = provider

    def provider_for(self, model_name: str, provider_enum: int = 0) -> ModelProvider:
        """Always the same provider."""
        return self.provider
