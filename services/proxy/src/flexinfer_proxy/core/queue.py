"""The cold-start queue: bounded FIFO waiters per model and one demand in flight per model."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from flexinfer_common.bus.topics import DemandEvent
from flexinfer_common.errors import FlexInferError
from flexinfer_proxy.core.backoff import Backoff
from flexinfer_proxy.core.errors import ActivationTimeoutError, QueueFullError

log = logging.getLogger(__name__)

PublishDemand = Callable[[DemandEvent], Awaitable[None]]
RefreshEndpoints = Callable[[str], Awaitable[None]]


@dataclass(slots=True, eq=False)
class Ticket:
    """One request's place in a model's queue: ``future`` resolves when it may go on."""

    model: str
    future: asyncio.Future[None]


@dataclass
class _ModelQueue:
    waiters: deque[asyncio.Future[None]] = field(default_factory=deque)
    since: datetime = field(default_factory=lambda: datetime.now(UTC))
    demand: asyncio.Task[None] | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the depth changed: the demand loop re-publishes the new depth promptly."""
    emptied_at: float | None = None
    """When the queue last became empty (monotonic); stale empty queues are cleaned."""
    adapter: tuple[str, str] | None = None
    """(base Model key, adapter name) when it holds requests for a LoRA adapter to be
    loaded: the demand names both (the Model starts, and the adapter is loaded into it)."""


class ColdStartQueue:
    """Requests waiting for a model's first ready endpoint, released in arrival order."""

    def __init__(
        self,
        *,
        proxy_id: str,
        max_size: int,
        resend_interval_s: float,
        retry_after_s: float,
        publish_demand: PublishDemand,
        refresh_endpoints: RefreshEndpoints | None = None,
        on_depth: Callable[[str, int], None] | None = None,
        on_cold_start: Callable[[str], None] | None = None,
        backoff: Backoff | None = None,
        depth_update_interval_s: float = 0.25,
    ) -> None:
        self._proxy_id = proxy_id
        self._max_size = max_size
        self._resend_interval_s = resend_interval_s
        self._retry_after_s = retry_after_s
        self._publish_demand = publish_demand
        self._refresh_endpoints = refresh_endpoints
        self._on_depth = on_depth
        self._on_cold_start = on_cold_start
        self._backoff = backoff
        self._depth_update_interval_s = depth_update_interval_s
        self._queues: dict[str, _ModelQueue] = {}

    def known(self) -> list[str]:
        """Models with a queue object (waiting or recently emptied)."""
        return list(self._queues)

    def cleanup_stale(self, max_empty_age_s: float, now: float | None = None) -> list[str]:
        """Remove queues empty for at least ``max_empty_age_s``; returns their models."""
        now = time.monotonic() if now is None else now
        stale = [
            m
            for m, q in self._queues.items()
            if not q.waiters and q.emptied_at is not None and now - q.emptied_at >= max_empty_age_s
        ]
        for model in stale:
            del self._queues[model]
        return stale

    def depth(self, model: str) -> int:
        """Requests now waiting for ``model``."""
        queue = self._queues.get(model)
        return len(queue.waiters) if queue else 0

    def join(self, model: str, label: str, adapter: tuple[str, str] | None = None) -> Ticket:
        """A place in ``model``'s queue; QueueFullError when it is full (``label`` names
        the model in messages). The caller must ``leave`` it. ``adapter``: the queue is
        one of requests for a LoRA adapter, (base Model key, adapter name)."""
        queue = self._queues.get(model)
        if queue is None:
            queue = self._queues[model] = _ModelQueue(adapter=adapter)
        if len(queue.waiters) >= self._max_size:
            raise QueueFullError(label, len(queue.waiters), delay=self._retry_after_s)
        queue.emptied_at = None
        ticket = Ticket(model, asyncio.get_running_loop().create_future())
        queue.waiters.append(ticket.future)
        self._depth_changed(model, queue)
        self._ensure_demand(model, queue)
        return ticket

    def leave(self, ticket: Ticket) -> None:
        """Give up the place (released, timed out, or the client went away)."""
        if not ticket.future.done():
            ticket.future.cancel()
        elif not ticket.future.cancelled():
            ticket.future.exception()  # retrieved: a failure nobody awaited is not logged
        self._discard(ticket.model, ticket.future)

    async def wait(
        self,
        model: str,
        label: str,
        deadline: float,
        waited_from: float,
        adapter: tuple[str, str] | None = None,
    ) -> None:
        """Wait until ``release(model)`` or raise at ``deadline`` (monotonic seconds).

        ``label`` names the model in messages; ``waited_from`` is when the request began
        waiting, for the timeout message. Raises QueueFullError when the queue is full,
        and what ``fail`` was given when the model cannot start. ``adapter`` as ``join``.
        """
        ticket = self.join(model, label, adapter)
        try:
            async with asyncio.timeout_at(_loop_time(deadline)):
                await ticket.future
        except TimeoutError:
            raise self.timeout_error(label, waited_from) from None
        finally:
            self.leave(ticket)

    def timeout_error(self, label: str, waited_from: float) -> ActivationTimeoutError:
        """The error for a request that waited from ``waited_from`` in vain."""
        return ActivationTimeoutError(
            label, time.monotonic() - waited_from, delay=self._retry_after_s
        )

    def fail(self, model: str, error: FlexInferError) -> int:
        """Wake every waiter of ``model`` with ``error`` (it cannot start); how many."""
        queue = self._queues.get(model)
        if queue is None:
            return 0
        failed = 0
        while queue.waiters:
            future = queue.waiters.popleft()
            if not future.done():
                future.set_exception(error)
                failed += 1
        self._cleanup(model, queue)
        return failed

    def release(self, model: str) -> int:
        """Wake every waiter of ``model`` in arrival order; returns how many."""
        queue = self._queues.get(model)
        if queue is None:
            return 0
        released = 0
        while queue.waiters:
            future = queue.waiters.popleft()
            if not future.done():
                future.set_result(None)
                released += 1
        self._cleanup(model, queue)
        return released

    async def aclose(self) -> None:
        """Stop the demand loops (waiters are left to their own deadlines)."""
        tasks = [q.demand for q in self._queues.values() if q.demand is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _discard(self, model: str, future: asyncio.Future[None]) -> None:
        queue = self._queues.get(model)
        if queue is None:
            return
        with contextlib.suppress(ValueError):
            queue.waiters.remove(future)
        self._cleanup(model, queue)

    def _cleanup(self, model: str, queue: _ModelQueue) -> None:
        self._depth_changed(model, queue)
        if queue.waiters:
            return
        if queue.demand is not None and queue.demand is not asyncio.current_task():
            queue.demand.cancel()
        queue.demand = None
        # Kept (empty) until cleanup_stale: the seed's queues live 2x the queue timeout.
        if queue.emptied_at is None:
            queue.emptied_at = time.monotonic()

    def _depth_changed(self, model: str, queue: _ModelQueue) -> None:
        queue.changed.set()
        if self._on_depth is not None:
            self._on_depth(model, len(queue.waiters))

    def _ensure_demand(self, model: str, queue: _ModelQueue) -> None:
        # Singleflight: one demand loop per model while anything waits.
        if queue.demand is not None and not queue.demand.done():
            return
        queue.since = datetime.now(UTC)
        if self._on_cold_start is not None:
            self._on_cold_start(model)
        queue.demand = asyncio.create_task(
            self._demand_loop(model, queue), name=f"proxy-demand-{model}"
        )

    async def _demand_loop(self, model: str, queue: _ModelQueue) -> None:
        # Without backoff: re-send every resend interval. With it: re-send after growing,
        # jittered waits, max_retries times, then only when the depth changes.
        delays = self._backoff.delays() if self._backoff is not None else None
        while queue.waiters:
            queue.changed.clear()
            base, adapter = queue.adapter or (model, None)
            event = DemandEvent(
                model=base,
                queue_depth=len(queue.waiters),
                since=queue.since,
                proxy=self._proxy_id,
                adapter=adapter,
            )
            try:
                await self._publish_demand(event)
            except FlexInferError as exc:
                log.warning("demand for %s not published (retrying): %s", model, exc)
            wait = self._resend_interval_s if delays is None else next(delays, None)
            await self._wait_change(queue, wait)
            if self._refresh_endpoints is not None and queue.waiters:
                # Endpoint events can be lost too: look at the store while waiting.
                try:
                    await self._refresh_endpoints(model)
                except FlexInferError as exc:
                    log.warning("endpoint refresh for %s failed: %s", model, exc)

    async def _wait_change(self, queue: _ModelQueue, wait: float | None) -> None:
        """Sleep ``wait`` seconds (forever if None) or until the depth changes, but never
        publish more often than the depth update interval."""
        gap = (
            self._depth_update_interval_s
            if wait is None
            else min(wait, self._depth_update_interval_s)
        )
        await asyncio.sleep(gap)
        if queue.changed.is_set():
            return
        remaining = None if wait is None else max(0.0, wait - gap)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(remaining):
                await queue.changed.wait()


def _loop_time(deadline: float) -> float:
    """Convert a time.monotonic() deadline to the running loop's clock."""
    loop = asyncio.get_running_loop()
    return loop.time() + (deadline - time.monotonic())
