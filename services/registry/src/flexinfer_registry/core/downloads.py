"""Exactly-once downloads (ModelExpress's ModelDownloadTracker).

One download per cache key across every replica sharing a store: the store's atomic
``try_claim`` picks the winner. In this process, all callers for one key share one
:class:`Flight` task and see the same updates; callers on other replicas poll the store
record, whose ``message`` the winner refreshes with its progress every heartbeat. A
DOWNLOADED record whose files are gone from disk is deleted (compare-and-delete, so
exactly one replica does it) and claimed again. A winner
that crashes stops heartbeating, and its claim is reclaimed after ``stale_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from flexinfer_common.errors import FlexInferError
from flexinfer_registry.core.cache import CachedModel
from flexinfer_registry.core.context import CacheContext
from flexinfer_registry.core.download_status import (
    Flight,
    Progress,
    StatusUpdate,
    readable,
    typed,
)
from flexinfer_registry.core.paths import cache_key
from flexinfer_registry.core.providers.base import ModelProvider
from flexinfer_registry.core.records import ModelRecord, ModelStatus, Provider

log = logging.getLogger(__name__)

MAX_MISSING_RETRIES = 3
"""Times a DOWNLOADED-but-missing model is re-claimed in one request before giving up."""


RoomCheck = Callable[[], Awaitable[str | None]]
"""Run before a new download: None to go ahead, else why it must not start
(``ModelRemover.make_room``, which evicts first when the disk is low)."""

AfterDownload = Callable[[str], Awaitable[object]]
"""Run with the key once a new download is DOWNLOADED, before anyone hears of it
(``ModelRemover.enforce_size``, which evicts other models down to ``max_size_bytes``)."""


class ProviderResolver(Protocol):
    """Picks the provider of a model (``providers.registry.ProviderRegistry``)."""

    def provider_for(self, model_name: str, provider_enum: int = 0) -> ModelProvider:
        """The provider for ``model_name``; InvalidSpecError when there is none."""
        ...


@dataclass(frozen=True)
class DownloadRequest:
    """What EnsureModelDownloaded asks for."""

    name: str
    provider: Provider = Provider.HUGGING_FACE
    revision: str | None = None
    ignore_weights: bool = False

    @property
    def key(self) -> str:
        """The record key (validates the name: InvalidSpecError for a hostile one)."""
        return cache_key(self.name, self.revision, self.ignore_weights)


@dataclass(frozen=True)
class TrackerTiming:
    """Heartbeat, stale-claim and polling periods in seconds (see RegistrySettings)."""

    heartbeat_s: float = 5.0
    stale_s: float = 60.0
    poll_s: float = 0.1


class DownloadTracker:
    """Coordinates downloads into ``cache`` through ``store``; see the module docstring."""

    def __init__(
        self,
        context: CacheContext,
        providers: ProviderResolver,
        *,
        timing: TrackerTiming | None = None,
        make_room: RoomCheck | None = None,
        after_download: AfterDownload | None = None,
    ) -> None:
        self.store, self.cache = context.store, context.cache
        self.in_use, self.metrics, self.clock = context.in_use, context.metrics, context.clock
        self.providers = providers
        self.timing = timing or TrackerTiming()
        self.make_room = make_room
        self.after_download = after_download
        self._flights: dict[str, Flight] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def ensure(self, request: DownloadRequest) -> AsyncIterator[StatusUpdate]:
        """Status updates until the model is DOWNLOADED or ERROR (validates first)."""
        key = request.key
        self.providers.provider_for(request.name, int(request.provider))
        flight = self._flights.get(key)
        if flight is None:
            hit = await self._known_hit(key, request)
            if hit is not None:
                yield hit
                return
            flight = self._flights.get(key)  # one may have started while we looked
        if flight is None:
            flight = Flight()
            self._flights[key] = flight
            task = asyncio.create_task(self._run(key, request, flight), name=f"ensure {key}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        async for update in flight.updates():
            yield update

    async def _known_hit(self, key: str, request: DownloadRequest) -> StatusUpdate | None:
        """The hot path for a cached model: no task, no queue, no thread hop.

        Only answers when the record is DOWNLOADED and the manifest was seen before and every
        file still stats right; anything else (None) goes the full way through a flight.
        """
        record = await self.store.get(key)
        if record is None or record.status != ModelStatus.DOWNLOADED:
            return None
        model = self.cache.load_known(key)
        if model is None:
            return None
        await self.store.touch(key, now=self.clock())
        self.metrics.cache_hits.inc()
        return self._done(request, model)

    async def close(self) -> None:
        """Cancel in-flight downloads (their claims are released as ERROR)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self, key: str, request: DownloadRequest, flight: Flight) -> None:
        try:
            await self._coordinate(key, request, flight)
        except asyncio.CancelledError:
            flight.emit(self._update(request, ModelStatus.ERROR, "registry shutting down"))
            raise
        except Exception as exc:
            log.exception("ensure %s failed", key)
            error = typed(exc)
            flight.emit(self._update(request, ModelStatus.ERROR, readable(error or exc), error))
        finally:
            self._flights.pop(key, None)

    async def _coordinate(self, key: str, request: DownloadRequest, flight: Flight) -> None:
        missing = 0
        waited = False
        while True:
            record = await self.store.get(key)
            now = self.clock()
            if record is not None and record.status == ModelStatus.DOWNLOADED:
                # A manifest seen before is re-checked by stat inline (no thread hop);
                # anything else, or any doubt, takes the full load in a worker thread.
                model = self.cache.load_known(key) or await asyncio.to_thread(self.cache.load, key)
                if model is not None:
                    await self.store.touch(key, now=now)
                    if not waited:
                        self.metrics.cache_hits.inc()
                    flight.emit(self._done(request, model))
                    return
                missing += 1
                if missing > MAX_MISSING_RETRIES:
                    raise OSError(f"{key}: files keep disappearing from the cache")
                # Compare-and-delete: when replicas both find the files missing, one resets
                # the record; the others see it changed (or claimed) and look again.
                if await self.store.delete_if(key, ModelStatus.DOWNLOADED, record.updated_at):
                    log.warning("%s: DOWNLOADED but files are missing; downloading again", key)
                continue
            if record is not None and waited and record.status == ModelStatus.ERROR:
                flight.emit(self._update(request, ModelStatus.ERROR, record.message))
                return
            if record is None or not self._live_claim(record, now):
                if await self.store.try_claim(
                    key, request.provider, now=now, stale_after=self.timing.stale_s
                ):
                    await self._download(key, request, flight)
                    return
                continue
            waited = True
            message = record.message or "download in progress on another replica"
            flight.emit(self._update(request, ModelStatus.DOWNLOADING, message))
            await asyncio.sleep(self.timing.poll_s)

    def _live_claim(self, record: ModelRecord, now: float) -> bool:
        return (
            record.status == ModelStatus.DOWNLOADING
            and record.updated_at >= now - self.timing.stale_s
        )

    async def _download(self, key: str, request: DownloadRequest, flight: Flight) -> None:
        self.metrics.cache_misses.inc()
        self.metrics.downloads_started.inc()
        provider = self.providers.provider_for(request.name, int(request.provider))
        refusal = await self._room_refusal(key)
        if refusal is not None:
            await self._report_failure(key, request, flight, refusal)
            return
        progress = Progress()
        flight.emit(self._update(request, ModelStatus.DOWNLOADING, "download started"))
        staging = await asyncio.to_thread(self.cache.staging, key)
        stop = asyncio.Event()
        heartbeat = asyncio.create_task(self._heartbeat(key, request, flight, progress, stop))
        with self.in_use.using(key):
            try:
                result = await provider.download(
                    request.name,
                    request.revision,
                    staging / "files",
                    ignore_weights=request.ignore_weights,
                    progress=progress,
                )
                model = await asyncio.to_thread(
                    self.cache.install,
                    key,
                    request.name,
                    staging,
                    result.resolved_revision,
                    request.ignore_weights,
                )
            except asyncio.CancelledError:
                await _stopped(heartbeat, stop)
                await self._fail(key, request, "download interrupted (registry shutting down)")
                raise
            except Exception as exc:
                error = typed(exc)
                failure: str | None = readable(error or exc)
                log.warning("download of %s failed: %s", key, failure)
            else:
                failure, error = None, None
            finally:
                await _stopped(heartbeat, stop)
                await asyncio.to_thread(self.cache.remove_staging, staging)
        if failure is not None:
            # Files are cleaned up before anyone hears of the failure.
            await self._report_failure(key, request, flight, failure, error)
            return
        summary = f"downloaded {len(model.files)} files, {model.total_size} bytes"
        await self.store.set_status(
            key, request.provider, ModelStatus.DOWNLOADED, summary, now=self.clock()
        )
        self.metrics.downloads_completed.inc()
        self.metrics.bytes_downloaded.inc(model.total_size)
        await self._settle(key)
        flight.emit(self._done(request, model, summary))

    async def _room_refusal(self, key: str) -> str | None:
        """Why there is no room for this download (None: go ahead; see ``make_room``)."""
        if self.make_room is None:
            return None
        try:
            return await self.make_room()
        except Exception as exc:
            # A failed disk check is not a reason to risk filling the disk: refuse, readably.
            log.exception("%s: making room in the cache failed", key)
            return f"could not make room in the cache: {readable(exc)}"

    async def _settle(self, key: str) -> None:
        """Run ``after_download``; a failure there is logged, as the model itself is fine."""
        if self.after_download is None:
            return
        try:
            await self.after_download(key)
        except Exception:
            log.exception("%s: enforcing the cache size after the download failed", key)

    async def _report_failure(
        self,
        key: str,
        request: DownloadRequest,
        flight: Flight,
        failure: str,
        error: FlexInferError | None = None,
    ) -> None:
        """Release the claim as ERROR, count it, and tell every subscriber."""
        await self._fail(key, request, failure)
        self.metrics.downloads_failed.inc()
        flight.emit(self._update(request, ModelStatus.ERROR, failure, error))

    async def _fail(self, key: str, request: DownloadRequest, message: str) -> None:
        """Record ERROR so the claim is released at once (shielded: runs during cancel)."""
        write = self.store.set_status(
            key, request.provider, ModelStatus.ERROR, message, now=self.clock()
        )
        with contextlib.suppress(Exception):
            await asyncio.shield(write)

    async def _heartbeat(
        self,
        key: str,
        request: DownloadRequest,
        flight: Flight,
        progress: Progress,
        stop: asyncio.Event,
    ) -> None:
        """Refresh the claim every ``heartbeat_s`` until ``stop``; a write in progress when
        ``stop`` is set finishes first, so the caller's final status is the last word."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.timing.heartbeat_s)
            if stop.is_set():
                return
            message = progress.describe()
            try:
                await self.store.set_status(
                    key, request.provider, ModelStatus.DOWNLOADING, message, now=self.clock()
                )
            except FlexInferError as exc:
                log.warning("%s: heartbeat failed: %s", key, exc)
            flight.emit(self._update(request, ModelStatus.DOWNLOADING, message))

    def _update(
        self,
        request: DownloadRequest,
        status: ModelStatus,
        message: str | None,
        error: FlexInferError | None = None,
    ) -> StatusUpdate:
        return StatusUpdate(request.name, status, request.provider, message, error=error)

    def _done(
        self, request: DownloadRequest, model: CachedModel, message: str | None = None
    ) -> StatusUpdate:
        return StatusUpdate(
            request.name,
            ModelStatus.DOWNLOADED,
            request.provider,
            message or "model is cached",
            model.snapshot,
        )


async def _stopped(heartbeat: asyncio.Task[None], stop: asyncio.Event) -> None:
    """Stop the heartbeat and wait for it. Stopped, not cancelled: a heartbeat write already
    sent would otherwise land after the final status and revive the claim as DOWNLOADING,
    which other replicas then wait on for ``stale_s`` and download again."""
    stop.set()
    await asyncio.gather(asyncio.shield(heartbeat), return_exceptions=True)
