"""The provider interface: download one model revision into a directory, verified.

Providers raise only :mod:`flexinfer_common.errors` types:

- the source cannot be reached (DNS, refused, timeout, 5xx) -> :class:`SourceUnreachableError`
  (a :class:`~flexinfer_common.errors.TemporaryError` with a readable message);
- the model, revision or bucket does not exist -> :class:`~flexinfer_common.errors.NotFoundError`;
- credentials refused -> :class:`AccessDeniedError` (permanent until the config changes);
- a file fails its checksum or size check -> :class:`ChecksumMismatchError` (permanent);
- the source names a file outside the model directory -> :class:`UnsafePathError` (permanent);
- the registry's configuration does not allow the source (a ``file://`` path outside the
  configured roots) -> :class:`SourceNotAllowedError` (permanent; PERMISSION_DENIED);
- the model name itself is malformed -> :class:`~flexinfer_common.errors.InvalidSpecError`.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from flexinfer_common.errors import InvalidSpecError, PermanentError, TemporaryError

ProgressCallback = Callable[[int, int | None], None]
"""Called with (bytes downloaded so far, total bytes or None when not known yet)."""

DEFAULT_TIMEOUT_S = 30.0
"""Connect/read timeout for every provider request: ModelExpress's DEFAULT_TIMEOUT_SECS."""


class SourceUnreachableError(TemporaryError):
    """The provider's endpoint could not be reached or answered with a server error."""


class AccessDeniedError(PermanentError):
    """The provider refused our credentials (401/403)."""


class ChecksumMismatchError(PermanentError):
    """A downloaded file does not match the checksum or size the provider published."""


class UnsafePathError(PermanentError):
    """The source named a file whose path would escape the model directory."""


class SourceNotAllowedError(PermanentError):
    """The registry is not configured to read this source (a ``file://`` path outside the
    configured roots): permission denied, whatever the request."""


@dataclass(frozen=True)
class FileInfo:
    """One downloaded file: path relative to the model directory, size, verified checksum.

    ``checksum`` is ``"<algorithm>:<value>"`` (``sha256:…``, ``crc32c:…``, ``etag:…``,
    ``blake3:…``, ``size`` when the source publishes no checksum) so callers can tell what was
    verified.
    """

    path: str
    size: int
    checksum: str


@dataclass(frozen=True)
class DownloadResult:
    """What a provider wrote into ``dest_dir``."""

    resolved_revision: str | None
    """The immutable revision actually downloaded (HF commit SHA, NGC version, …) if any."""

    files: tuple[FileInfo, ...] = field(default_factory=tuple)

    @property
    def total_size(self) -> int:
        """Sum of the file sizes in bytes."""
        return sum(f.size for f in self.files)


@dataclass(frozen=True)
class ProviderConfig:
    """Settings every provider receives from its factory."""

    timeout_s: float = DEFAULT_TIMEOUT_S
    """Per-request connect/read timeout in seconds: an unreachable source fails, never hangs."""

    env: dict[str, str] | None = None
    """Environment to read endpoints and credentials from (HF_ENDPOINT, AWS_*, NGC_API_KEY…);
    None means ``os.environ``. Tests pass their own mapping instead of mutating the process."""

    chunk_size: int = 1 << 20
    """Bytes read per network chunk while streaming a file to disk."""

    file_roots: tuple[Path, ...] = ()
    """Directories ``file://`` sources may be read from; none = ``file://`` is refused."""

    oci_insecure_registries: frozenset[str] = frozenset()
    """OCI registries (``host[:port]``, lowercase; a bare host means any port) reached over
    plain http; every other one over https."""

    oci_auth_file: Path | None = None
    """A docker ``config.json`` holding OCI registry credentials by host; None = anonymous."""


class ModelProvider(ABC):
    """Downloads models from one kind of source into a local directory."""

    name: ClassVar[str]
    """Registry name of the provider ("file", "huggingface", "s3", "gcs", "ngc", "oci")."""

    async def check(self, model_name: str) -> None:
        """Refuse ``model_name`` before anything is created (a record, a staging folder):
        InvalidSpecError, SourceNotAllowedError or NotFoundError. Most providers learn
        nothing before they download, so the default asks only for a name."""
        if not model_name:
            raise InvalidSpecError("model_name is required", field="model_name")

    @abstractmethod
    async def download(
        self,
        model_name: str,
        revision: str | None,
        dest_dir: Path,
        *,
        ignore_weights: bool = False,
        progress: ProgressCallback | None = None,
    ) -> DownloadResult:
        """Download every file of ``model_name`` at ``revision`` into ``dest_dir``, verified.

        ``dest_dir`` is created if missing; the caller renames it into the cache atomically.
        With ``ignore_weights`` weight files (see :func:`.files.is_weight_file`) are skipped.
        """


class BlockingProvider(ModelProvider):
    """A provider built on a blocking client library: the download runs in a worker thread."""

    async def download(
        self,
        model_name: str,
        revision: str | None,
        dest_dir: Path,
        *,
        ignore_weights: bool = False,
        progress: ProgressCallback | None = None,
    ) -> DownloadResult:
        """Run :meth:`download_blocking` in a thread, so the event loop keeps serving."""
        return await asyncio.to_thread(
            self.download_blocking, model_name, revision, dest_dir, ignore_weights, progress
        )

    @abstractmethod
    def download_blocking(
        self,
        model_name: str,
        revision: str | None,
        dest_dir: Path,
        ignore_weights: bool,
        progress: ProgressCallback | None,
    ) -> DownloadResult:
        """The download itself, as :meth:`ModelProvider.download` describes it."""


__all__ = [
    "DEFAULT_TIMEOUT_S",
    "AccessDeniedError",
    "BlockingProvider",
    "ChecksumMismatchError",
    "DownloadResult",
    "FileInfo",
    "ModelProvider",
    "ProgressCallback",
    "ProviderConfig",
    "SourceNotAllowedError",
    "SourceUnreachableError",
    "UnsafePathError",
]
