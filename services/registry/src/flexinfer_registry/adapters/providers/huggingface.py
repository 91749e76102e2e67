"""Hugging Face Hub through ``huggingface_hub``: revision pinning, patterns, verified files.

The endpoint is ``HF_ENDPOINT`` (default https://huggingface.co) and the token ``HF_TOKEN``,
read from the provider's environment and passed explicitly, so one process can serve several
configurations. The revision (branch, tag or commit; default ``main``) is resolved once to a
commit SHA and every file is fetched at that SHA, so a branch moving mid-download cannot mix
two commits. Each file is verified against the Hub's metadata: SHA-256 for LFS files, the git
blob id for the others, and the size for both.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx
from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import RepoSibling
from huggingface_hub.utils._paths import filter_repo_objects

from flexinfer_common.errors import NotFoundError
from flexinfer_registry.core.providers.base import (
    AccessDeniedError,
    BlockingProvider,
    DownloadResult,
    FileInfo,
    ProgressCallback,
    ProviderConfig,
    SourceUnreachableError,
)
from flexinfer_registry.core.providers.files import (
    WEIGHT_GLOBS,
    ProgressMeter,
    check_digest,
    check_size,
    safe_relative_path,
    target_path,
)

DEFAULT_ENDPOINT = "https://huggingface.co"


@contextmanager
def translate_hf_errors(what: str) -> Iterator[None]:
    """Map huggingface_hub / httpx failures onto the provider error tree."""
    try:
        yield
    except GatedRepoError as exc:
        raise AccessDeniedError(f"{what}: gated repository, HF_TOKEN lacks access") from exc
    except (RepositoryNotFoundError, RevisionNotFoundError, EntryNotFoundError) as exc:
        raise NotFoundError(f"{what}: {type(exc).__name__.removesuffix('Error')}") from exc
    except LocalEntryNotFoundError as exc:  # raised when the Hub cannot be reached at all
        raise SourceUnreachableError(f"{what}: Hugging Face endpoint unreachable") from exc
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else 0
        if status in (401, 403):
            raise AccessDeniedError(f"{what}: HTTP {status} (check HF_TOKEN)") from exc
        raise SourceUnreachableError(f"{what}: HTTP {status}") from exc
    except httpx.TimeoutException as exc:
        raise SourceUnreachableError(f"{what}: timed out") from exc
    except httpx.TransportError as exc:
        raise SourceUnreachableError(f"{what}: cannot connect ({exc})") from exc


def git_blob_sha1(path: Path) -> str:
    """The git blob id of a local file, as the Hub reports it for non-LFS files."""
    digest = hashlib.sha1(b"blob %d\0" % path.stat().st_size, usedforsecurity=False)
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def verify_sibling(sibling: RepoSibling, path: Path) -> FileInfo:
    """Check a downloaded file against the Hub's size and SHA-256 / blob id."""
    rel = sibling.rfilename
    size = path.stat().st_size
    check_size(rel, size, sibling.size)
    if sibling.lfs is not None:
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            while block := handle.read(1 << 20):
                digest.update(block)
        check_digest(rel, "sha256", digest.hexdigest(), sibling.lfs.sha256)
        return FileInfo(path=rel, size=size, checksum=f"sha256:{sibling.lfs.sha256}")
    if sibling.blob_id:
        check_digest(rel, "git blob id", git_blob_sha1(path), sibling.blob_id)
        return FileInfo(path=rel, size=size, checksum=f"gitsha1:{sibling.blob_id}")
    return FileInfo(path=rel, size=size, checksum="size")


class HuggingFaceProvider(BlockingProvider):
    """Models on the Hugging Face Hub (or a mirror at HF_ENDPOINT)."""

    name = "huggingface"

    def __init__(
        self,
        config: ProviderConfig | None = None,
        *,
        allow_patterns: Sequence[str] | None = None,
        ignore_patterns: Sequence[str] | None = None,
    ) -> None:
        self._config = config or ProviderConfig()
        self._allow = list(allow_patterns) if allow_patterns else None
        self._ignore = list(ignore_patterns or ())
        env = self._config.env if self._config.env is not None else os.environ
        self._endpoint = (env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
        self._token = env.get("HF_TOKEN") or None

    def download_blocking(
        self,
        model_name: str,
        revision: str | None,
        dest_dir: Path,
        ignore_weights: bool,
        progress: ProgressCallback | None,
    ) -> DownloadResult:
        """Resolve the revision to a commit, then fetch and verify every selected file."""
        repo_id = model_name.removeprefix("hf://")
        what = f"Hugging Face {repo_id}@{revision or 'main'}"
        api = HfApi(endpoint=self._endpoint, token=self._token)
        with translate_hf_errors(what):
            info = api.model_info(repo_id, revision=revision or "main", files_metadata=True,
                                  timeout=self._config.timeout_s)  # fmt: skip
        sha = info.sha or revision or "main"
        siblings = self._select(list(info.siblings or ()), ignore_weights)
        meter = ProgressMeter(progress, sum(s.size or 0 for s in siblings))
        dest_dir.mkdir(parents=True, exist_ok=True)
        files = []
        for sibling in siblings:
            files.append(self._fetch(repo_id, sha, sibling, dest_dir, what))
            meter.add(files[-1].size)
        shutil.rmtree(dest_dir / ".cache" / "huggingface", ignore_errors=True)
        _rmdir_if_empty(dest_dir / ".cache")
        return DownloadResult(resolved_revision=sha, files=tuple(files))

    def _select(self, siblings: list[RepoSibling], ignore_weights: bool) -> list[RepoSibling]:
        for sibling in siblings:
            safe_relative_path(sibling.rfilename)  # refuse traversal before anything is written
        ignore = self._ignore + (list(WEIGHT_GLOBS) if ignore_weights else [])
        kept = filter_repo_objects(
            siblings,
            allow_patterns=self._allow,
            ignore_patterns=ignore or None,
            key=lambda s: s.rfilename,
        )
        return sorted(kept, key=lambda s: s.rfilename)

    def _fetch(
        self, repo_id: str, sha: str, sibling: RepoSibling, dest_dir: Path, what: str
    ) -> FileInfo:
        target = target_path(dest_dir, safe_relative_path(sibling.rfilename))
        with translate_hf_errors(f"{what} {sibling.rfilename}"):
            hf_hub_download(
                repo_id, sibling.rfilename, revision=sha, local_dir=dest_dir,
                endpoint=self._endpoint, token=self._token or False,
                etag_timeout=self._config.timeout_s,
            )  # fmt: skip
        try:
            return verify_sibling(sibling, target)
        except Exception:
            target.unlink(missing_ok=True)
            raise


def _rmdir_if_empty(path: Path) -> None:
    with suppress(OSError):
        path.rmdir()
