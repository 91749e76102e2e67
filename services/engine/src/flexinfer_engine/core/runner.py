"""Asyncio side of the engine: a fair queue, worker threads, state, sleep/wake ordering."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import gc
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from flexinfer_common.errors import ConfigError, UnavailableError
from flexinfer_engine.core.adapters import AdapterRegistry
from flexinfer_engine.core.engine import Delta, Event, Finished, InferenceEngine, LoadInfo
from flexinfer_engine.core.lora import Adapter
from flexinfer_engine.core.sampling import SamplingParams

log = logging.getLogger(__name__)


class State(enum.Enum):
    """Lifecycle of the served model."""

    LOADING = "loading"
    READY = "ready"
    SLEEPING = "sleeping"
    FAILED = "failed"


@dataclass(frozen=True)
class Hooks:
    """Callbacks for metrics: tokens generated, seconds to the first token."""

    on_tokens: Callable[[int], None] = lambda count: None
    on_first_token: Callable[[float], None] = lambda seconds: None


_DONE = object()


class Generation:
    """One running request: its events as an async iterator, and a way to stop it."""

    def __init__(self, queue: asyncio.Queue[object], cancel: threading.Event) -> None:
        self._queue = queue
        self._cancel = cancel

    def cancel(self) -> None:
        """Stop generating (the client went away)."""
        self._cancel.set()

    async def events(self) -> AsyncIterator[Event]:
        """Events as the worker thread produces them; re-raises its errors."""
        try:
            while True:
                item = await self._queue.get()
                if item is _DONE:
                    return
                if isinstance(item, BaseException):
                    raise item
                assert isinstance(item, Delta | Finished)
                yield item
        finally:
            self._cancel.set()


def _post(loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: object) -> None:
    # RuntimeError: the loop is closed, nobody is listening any more.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, *args)


class WeightSource(Protocol):
    """Serves the loaded weights to peers; started when awake, stopped before they go."""

    def start(self) -> None:
        """Begin serving (called in a worker thread)."""

    def stop(self) -> None:
        """Stop serving; the weights are about to be freed (called in a worker thread)."""


class AsyncRunner:
    """Admits requests in arrival order, runs generations in threads, owns the state."""

    def __init__(
        self,
        engine: InferenceEngine,
        adapters: AdapterRegistry,
        *,
        max_concurrent: int = 1,
        max_waiting: int = 256,
        hooks: Hooks | None = None,
        source: WeightSource | None = None,
    ) -> None:
        self.engine = engine
        self.source = source
        self.adapters = adapters
        self.hooks = hooks or Hooks()
        self.max_waiting = max_waiting
        self.state = State.READY if engine.loaded else State.LOADING
        self.error: str | None = None
        self.waiting = 0
        self._slots = asyncio.Semaphore(max_concurrent)
        self._active = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._lifecycle = asyncio.Lock()
        self._loaded = asyncio.Event()
        if engine.loaded:
            self._loaded.set()

    @property
    def running(self) -> int:
        """Generations running now (their slot taken, their thread not yet released)."""
        return self._active

    async def load(self) -> LoadInfo | None:
        """Load the weights in a thread; on failure the state becomes FAILED."""
        try:
            info = await asyncio.to_thread(self.engine.load)
        except Exception as exc:
            self.state, self.error = State.FAILED, str(exc)
            log.error("loading %s failed: %s", self.engine.model_dir, exc)
            return None
        else:
            # What exists now (torch, the app, the model's modules) lives as long as the
            # process: the collector stops scanning it, so the full collection of each sleep
            # takes milliseconds instead of most of a second (it walked every object of torch).
            gc.freeze()
            await self.start_source()
            return info
        finally:
            if self.state is State.LOADING:
                self.state = State.READY
            self._loaded.set()

    async def start_source(self) -> None:
        """Serve the weights to peers, when configured; a failure is logged, not fatal."""
        if self.source is None:
            return
        try:
            await asyncio.to_thread(self.source.start)
        except Exception as exc:  # peers then load elsewhere; this engine still serves
            log.warning("serving the weights to peers failed: %s", exc)

    async def stop_source(self) -> None:
        """Withdraw the weights from peers (before they are freed)."""
        if self.source is None:
            return
        try:
            await asyncio.to_thread(self.source.stop)
        except Exception as exc:
            log.warning("withdrawing the weights from peers failed: %s", exc)

    async def wait_loaded(self) -> bool:
        """Wait for the end of loading; True when it succeeded."""
        await self._loaded.wait()
        return self.state is not State.FAILED

    def _check_serving(self) -> None:
        if self.state is State.READY:
            return
        if self.state is State.FAILED:
            raise UnavailableError(f"the model failed to load: {self.error}", delay=30)
        raise UnavailableError(f"the model is {self.state.value}", delay=5)

    async def start(
        self,
        prompts: Sequence[list[int]],
        params: SamplingParams,
        adapter: Adapter | None = None,
    ) -> Generation:
        """Wait for a slot (FIFO), then start generating in a worker thread (through the
        LoRA ``adapter`` when one is given)."""
        received = time.perf_counter()
        self._check_serving()
        if self.waiting >= self.max_waiting:
            raise UnavailableError("too many requests are waiting", delay=1)
        self.waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self.waiting -= 1
        try:
            self._check_serving()  # it may have gone to sleep while we waited
        except UnavailableError:
            self._slots.release()
            raise
        self._active += 1
        self._idle.clear()
        queue: asyncio.Queue[object] = asyncio.Queue()
        cancel = threading.Event()
        loop = asyncio.get_running_loop()
        thread = threading.Thread(
            target=self._work,
            name="flexinfer-generate",
            daemon=True,
            args=(loop, queue, cancel, list(prompts), params, received, adapter),
        )
        thread.start()
        return Generation(queue, cancel)

    def _work(
        self,
        loop: asyncio.AbstractEventLoop,
        queue: asyncio.Queue[object],
        cancel: threading.Event,
        prompts: list[list[int]],
        params: SamplingParams,
        received: float,
        adapter: Adapter | None,
    ) -> None:
        first = True
        final: object = _DONE
        try:
            for event in self.engine.generate(prompts, params, cancel, adapter):
                if isinstance(event, Delta) and event.tokens:
                    if first:
                        self.hooks.on_first_token(time.perf_counter() - received)
                        first = False
                    self.hooks.on_tokens(event.tokens)
                _post(loop, queue.put_nowait, event)
        except Exception as exc:
            log.exception("generation failed")
            final = exc
        finally:
            _post(loop, self._end, queue, final)

    def _end(self, queue: asyncio.Queue[object], final: object) -> None:
        """The generation ended: its slot is free before its caller hears the end (in one
        callback, so that no request sees an ended generation still counted as running)."""
        self._release()
        queue.put_nowait(final)

    def _release(self) -> None:
        self._active -= 1
        if self._active == 0:
            self._idle.set()
        self._slots.release()

    async def sleep(self, level: int) -> None:
        """Refuse new requests, let running ones finish, then offload the weights."""
        if level not in (1, 2):
            raise ConfigError("level must be 1 or 2")
        async with self._lifecycle:
            self._check_lifecycle()
            if self.state is State.SLEEPING:
                return
            self.state = State.SLEEPING
            await self._idle.wait()
            await self.stop_source()
            await asyncio.to_thread(self.engine.sleep, level)
            # Adapters are small: kept on the host at both levels, not re-read from disk.
            await asyncio.to_thread(self.adapters.move, torch.device("cpu"))

    async def wake(self) -> None:
        """Bring the weights back and serve again."""
        async with self._lifecycle:
            self._check_lifecycle()
            if self.state is not State.SLEEPING:
                return
            await asyncio.to_thread(self.engine.wake)
            await asyncio.to_thread(self.adapters.move, self.engine.device)
            self.state = State.READY
            await self.start_source()

    async def load_adapter(self, name: str, path: str, *, replace: bool = False) -> Adapter:
        """Read the LoRA adapter at ``path`` and serve it as ``name`` (``replace``: reload
        an adapter of that name in place). Serialised with sleep/wake and other loads."""
        async with self._lifecycle:
            self.adapters.check_load(name, path, replace=replace)
            adapter = await asyncio.to_thread(self.adapters.read, name, path)
            self.adapters.add(adapter)
        log.info("loaded LoRA adapter %r from %s (rank %d)", name, path, adapter.rank)
        return adapter

    async def unload_adapter(self, name: str) -> None:
        """Stop serving the adapter ``name``; requests already using it finish with it."""
        async with self._lifecycle:
            self.adapters.remove(name)
        log.info("unloaded LoRA adapter %r", name)

    def _check_lifecycle(self) -> None:
        if self.state in (State.LOADING, State.FAILED):
            raise UnavailableError(f"the model is {self.state.value}", delay=5)
