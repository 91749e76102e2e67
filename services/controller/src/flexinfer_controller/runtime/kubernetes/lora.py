"""LoRAAdapter sources on the kubernetes runtime: the engine's paths, and fetch Jobs.

A ``LocalPath`` adapter is loaded from its path inside the engine container: a directory
of the base Model's volume (mounted at ``/models``), or of the image. A ``HuggingFace``
or ``OCI`` adapter is fetched by a Job into the base Model's cache volume (see
``lora_jobs``): phase Caching until the Job succeeded, then loaded from the mounted path.

``ensure`` answers at once from what the Job last said; a background task per adapter
creates the Job (or finds it, after a restart) and reads it every ``poll_s`` until it
succeeded or failed, re-queueing the base Model whenever its state moved. A failed Job
fails the adapter; a new source renders a new Job. On delete the fetch Job goes and a
cleanup Job removes the files.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from flexinfer_common.api import LoRAAdapter, LoRASourceType, Model
from flexinfer_common.errors import FlexInferError, InvalidSpecError
from flexinfer_controller.backends.base import BackendRegistry, UnsupportedBackendError
from flexinfer_controller.core.cache import CacheState, CacheStatus, Notify
from flexinfer_controller.core.lora.roots import AdapterRoots
from flexinfer_controller.core.lora.sources import registry_source
from flexinfer_controller.runtime.kubernetes import lora_jobs, plan
from flexinfer_controller.runtime.kubernetes.apply import Applier
from flexinfer_controller.runtime.kubernetes.context import RenderContext, build_context
from flexinfer_controller.runtime.kubernetes.gate import job_state
from flexinfer_controller.runtime.kubernetes.names import Obj
from flexinfer_controller.runtime.kubernetes.options import MODEL_MOUNT, RenderOptions
from flexinfer_controller.settings import ControllerSettings

log = logging.getLogger(__name__)
NO_VOLUME = "NoCacheVolume"
REASONS = {
    CacheStatus.READY: "Cached",
    CacheStatus.PENDING: "Downloading",
    CacheStatus.FAILED: "FetchFailed",
}
"""The Cached condition's reason for each state of the fetch Job."""
RERUN_HINT = "change the adapter's source, or delete and re-create it, to run it again"


def adapter_roots(settings: ControllerSettings) -> AdapterRoots:
    """The operator's roots (paths in the engine container) and the base Model's volume,
    where fetched adapters go; paths are compared as written (the controller does not see
    the container's filesystem)."""
    return AdapterRoots.of(settings.lora_roots, [MODEL_MOUNT])


@dataclass
class _Fetch:
    """One adapter's fetch Job, as last read."""

    job: str
    path: str
    """Where the engines load it from once the Job succeeded."""
    model: str
    state: CacheState
    task: asyncio.Task[None] | None = None


class JobAdapterCache:
    """Fetches remote adapters with Jobs into their base Model's cache volume."""

    def __init__(
        self,
        applier: Applier,
        backends: BackendRegistry,
        options: RenderOptions,
        notify: Notify,
        *,
        poll_s: float = 5.0,
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._applier = applier
        self._on_close = on_close
        self._backends = backends
        self._options = options
        self._notify = notify
        self._poll_s = poll_s
        self._fetches: dict[str, _Fetch] = {}
        """Adapter key -> its current fetch."""

    def ensure(self, adapter: LoRAAdapter, source: str, model: Model) -> CacheState:
        """The fetch Job's state (READY with the engines' path); starts following it."""
        try:
            ctx = build_context(model, self._backends, self._options)
        except (InvalidSpecError, UnsupportedBackendError) as exc:
            # The Model's own status says so; the adapter is fetched once it can run.
            why = f"Model {model.key} cannot run as written ({exc}); fetched once it can"
            return CacheState.pending(REASONS[CacheStatus.PENDING], why)
        if (problem := lora_jobs.volume_problem(ctx)) is not None:
            return CacheState.failed(NO_VOLUME, problem)
        job, path = lora_jobs.fetch_job(ctx, adapter, source)
        name = job["metadata"]["name"]
        current = self._fetches.get(adapter.key)
        if current is not None and current.job == name:
            return current.state
        if current is not None and current.task is not None:
            current.task.cancel()  # another source: its Job is the old spec's
        pending = CacheState.pending(
            REASONS[CacheStatus.PENDING], f"the {lora_jobs.FETCH} Job {name} is being created"
        )
        fetch = self._fetches[adapter.key] = _Fetch(name, path, model.key, pending)
        fetch.task = asyncio.get_running_loop().create_task(
            self._follow(fetch, job), name=f"lora-fetch-{adapter.key}"
        )
        return fetch.state

    def _context(self, model: Model) -> RenderContext | None:
        """The base Model's render, when it has a cache volume adapters go in."""
        try:
            ctx = build_context(model, self._backends, self._options)
        except (InvalidSpecError, UnsupportedBackendError):
            return None
        return ctx if lora_jobs.volume_problem(ctx) is None else None

    async def _follow(self, fetch: _Fetch, job: Obj) -> None:
        """Create (or find) the Job, then read it until it succeeded or failed."""
        while True:
            try:
                state = job_state(await self._applier.ensure(job), RERUN_HINT)
            except FlexInferError as exc:  # the apiserver: try again at the next look
                state = CacheState.pending("", f"the {lora_jobs.FETCH} Job {fetch.job}: {exc}")
            path = Path(fetch.path) if state.status is CacheStatus.READY else None
            state = dataclasses.replace(state, reason=REASONS[state.status], path=path)
            if state != fetch.state:
                fetch.state = state
                self._notify(fetch.model)
            if state.status is not CacheStatus.PENDING:
                return
            await asyncio.sleep(self._poll_s)  # nothing watches Jobs: look again

    async def release(self, adapter: LoRAAdapter, model: Model | None) -> None:
        """Delete the fetch Job and remove the files (a cleanup Job); with the Model gone,
        its Jobs and the volume it owned go with it."""
        fetch = self._fetches.pop(adapter.key, None)
        if fetch is not None and fetch.task is not None:
            fetch.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await fetch.task
        source = adapter.spec.source
        if model is None or source.type is LoRASourceType.LOCAL_PATH:
            return
        uri = registry_source(source.type, source.uri)
        ctx = self._context(model)
        if ctx is None or uri is None:
            return
        job, _ = lora_jobs.fetch_job(ctx, adapter, uri)
        await self._applier.delete_all([plan.delete(job)])
        cleanup = lora_jobs.cleanup_job(ctx, adapter)
        await self._applier.ensure(cleanup)
        log.info("loraadapter %s: fetch Job deleted, files removed by Job %s", adapter.key,
                 cleanup["metadata"]["name"])  # fmt: skip

    async def close(self) -> None:
        """Stop following the Jobs (they run on; a restart finds them)."""
        tasks = [f.task for f in self._fetches.values() if f.task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._fetches.clear()
        if self._on_close is not None:
            await self._on_close()
