"""``ModelCache`` through the registry: EnsureModelDownloaded, then StreamModelFiles.

One background task per Model fetches its source: the registry downloads it into its own
cache (deduplicated: a cached model answers DOWNLOADED at once), then streams the files
into ``<cache_dir>/<namespace>_<name>/`` (see :mod:`.files`). ``ensure`` only reads the
task's latest state, so a reconcile never waits; every visible change (a new reason, a
new whole percent) re-queues the Model. A complete directory carries a marker naming its
source, so a restarted controller serves it without asking the registry again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from flexinfer_common.api import Model
from flexinfer_controller.adapters.registry.client import (
    ModelRef,
    RegistryCallError,
    RegistryClient,
    with_stall_timeout,
)
from flexinfer_controller.adapters.registry.files import (
    ModelWriter,
    UnsafeFileError,
    installed,
    remove_leftovers,
    remove_model,
)
from flexinfer_controller.adapters.registry.settings import RegistryClientSettings
from flexinfer_controller.core.cache import CacheState, CacheStatus, DownloadProgress, Notify

log = logging.getLogger(__name__)

DOWNLOADING = "Downloading"
TRANSFERRING = "Transferring"
REGISTRY_UNAVAILABLE = "RegistryUnavailable"
RETRYING = "DownloadRetrying"
UNSAFE = "UnsafeModelFiles"
_FAILED_REASONS = {
    "NOT_FOUND": "SourceNotFound",
    "INVALID_ARGUMENT": "InvalidSource",
    "PERMISSION_DENIED": "SourceDenied",
    "RESOURCE_EXHAUSTED": "RegistryCacheFull",
}
_BYTES = re.compile(r"(\d+) of (\d+) bytes")
_DONE = re.compile(r"downloading: (\d+) bytes")


def parse_progress(message: str) -> DownloadProgress | None:
    """The registry's ``downloading: D of T bytes (P%)`` message as numbers."""
    if match := _BYTES.search(message):
        done, total = int(match[1]), int(match[2])
        fraction = min(1.0, done / total) if total > 0 else None
        return DownloadProgress(fraction, done, total)
    if match := _DONE.search(message):
        return DownloadProgress(None, int(match[1]), None)
    return None


def _described(prefix: str, progress: DownloadProgress) -> str:
    done, total = progress.bytes_done, progress.bytes_total
    if progress.percent is not None:
        return f"{prefix} {done} of {total} bytes ({progress.percent}%)"
    return f"{prefix} {done} bytes"


@dataclass
class _Job:
    source: str
    generation: int
    state: CacheState
    task: asyncio.Task[None] | None = None


class RegistryModelCache:
    """Fetches each Model's remote source through the registry, in the background."""

    def __init__(
        self, client: RegistryClient, settings: RegistryClientSettings, root: Path, notify: Notify
    ) -> None:
        self._client = client
        self._settings = settings
        self._root = root
        self._notify = notify
        self._jobs: dict[str, _Job] = {}

    def ensure(self, model: Model) -> CacheState:
        """The state of ``model``'s files; starts the fetch when none runs for its source."""
        generation = model.metadata.generation or 1
        return self.ensure_source(model.key, _dirname(model), model.spec.source, generation)

    def ensure_source(self, key: str, dirname: str, source: str, generation: int) -> CacheState:
        """The state of ``source`` fetched for ``key`` into ``<root>/<dirname>``; starts the
        fetch when none runs for that source (``notify`` is called with ``key``)."""
        job = self._jobs.get(key)
        # A failed fetch is retried by a spec change, as a crash loop is.
        if job is not None and job.source == source:
            retry = job.state.status is CacheStatus.FAILED and job.generation != generation
            if not retry:
                return job.state
        if job is not None and job.task is not None:
            job.task.cancel()  # the source changed: that download serves no one now
        path = installed(self._root, dirname, source)
        if path is not None:
            state = CacheState.ready(path, f"{source} is in {path}")
            self._jobs[key] = _Job(source, generation, state)
            return state
        state = CacheState.pending(
            DOWNLOADING, f"asking the registry at {self._client.address} for {source}"
        )
        job = self._jobs[key] = _Job(source, generation, state)
        job.task = asyncio.create_task(self._run(key, dirname, job), name=f"cache-{key}")
        return state

    async def _run(self, key: str, dirname: str, job: _Job) -> None:
        """Fetch until done, a permanent failure, or cancellation; transient ones back off."""
        delay = self._settings.retry_initial_s
        while True:
            try:
                path = await self._fetch(key, dirname, job)
            except RegistryCallError as exc:
                if exc.permanent:
                    reason = _FAILED_REASONS.get(exc.code, "DownloadFailed")
                    self._set(key, job, CacheState.failed(reason, f"the registry: {exc}"))
                    return
                reason = REGISTRY_UNAVAILABLE if exc.code == "UNAVAILABLE" else RETRYING
                message = f"{exc}; retrying in {delay:.1f}s"
                self._set(key, job, CacheState.pending(reason, message))
            except UnsafeFileError as exc:
                self._set(key, job, CacheState.failed(UNSAFE, str(exc)))
                return
            except OSError as exc:  # our disk: full, or a permission; it may be fixed
                message = f"cannot write {job.source} under {self._root}: {exc}; retrying"
                self._set(key, job, CacheState.pending("CacheWriteFailed", message))
            else:
                self._set(key, job, CacheState.ready(path, f"{job.source} is in {path}"))
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._settings.retry_max_s)

    async def _fetch(self, key: str, dirname: str, job: _Job) -> Path:
        ref = ModelRef.of(job.source)
        stall = self._settings.stall_timeout_s
        prefix = f"the registry is downloading {job.source}:"
        async for update in with_stall_timeout(self._client.ensure(ref), stall):
            progress = parse_progress(update.message)
            message = _described(prefix, progress) if progress else f"{prefix} {update.message}"
            self._set(key, job, CacheState.pending(DOWNLOADING, message.rstrip(": "), progress))
        files = await self._client.list_files(ref)
        await asyncio.to_thread(remove_leftovers, self._root, dirname)
        writer = await asyncio.to_thread(ModelWriter, self._root, dirname, files)
        try:
            await self._receive(key, job, ref, writer)
            return await asyncio.to_thread(writer.install, job.source)
        except BaseException:
            await asyncio.to_thread(writer.discard)
            raise

    async def _receive(self, key: str, job: _Job, ref: ModelRef, writer: ModelWriter) -> None:
        """StreamModelFiles into ``writer``, reporting the copy's progress."""
        total, done = writer.total, 0
        prefix = f"copying {job.source} from the registry:"
        chunks = self._client.stream_files(ref, self._settings.chunk_size)
        async for chunk in with_stall_timeout(chunks, self._settings.stall_timeout_s):
            await asyncio.to_thread(writer.write, chunk.relative_path, chunk.offset, chunk.data)
            if chunk.is_last_chunk:
                writer.end_file(chunk.relative_path)
            done += len(chunk.data)
            progress = DownloadProgress(done / total if total else None, done, total)
            state = CacheState.pending(TRANSFERRING, _described(prefix, progress), progress)
            self._set(key, job, state)

    def _set(self, key: str, job: _Job, state: CacheState) -> None:
        """Record ``state``; re-queue the Model when a status would show the change."""
        if self._jobs.get(key) is not job:
            return  # replaced (new source) or released: not ours to report
        before, job.state = job.state, state
        shown = (state.status, state.reason, state.progress.percent if state.progress else None)
        was = (before.status, before.reason, before.progress.percent if before.progress else None)
        if shown != was:
            if state.status is not CacheStatus.PENDING or state.reason != before.reason:
                log.info("%s: cache %s (%s): %s", key, state.status, state.reason, state.message)
            self._notify(key)

    async def release(self, key: str) -> None:
        """Stop ``key``'s fetch and remove its directory."""
        namespace, _, name = key.partition("/")
        await self.release_source(key, f"{namespace}_{name}")

    async def release_source(self, key: str, dirname: str) -> None:
        """Stop ``key``'s fetch and remove ``<root>/<dirname>``."""
        job = self._jobs.pop(key, None)
        if job is not None and job.task is not None:
            job.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await job.task
        await asyncio.to_thread(remove_model, self._root, dirname)

    async def close(self) -> None:
        """Stop every fetch (completed directories stay) and close the channel."""
        tasks = [job.task for job in self._jobs.values() if job.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._jobs.clear()
        await self._client.close()


def _dirname(model: Model) -> str:
    return f"{model.metadata.namespace}_{model.metadata.name}"
