"""The loop every service runs for a consumer: fetch a batch, handle it, ack it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from flexinfer_common.bus.base import Consumer, EventBus, Message
from flexinfer_common.errors import FlexInferError, TemporaryError

log = logging.getLogger(__name__)

BatchHandler = Callable[[list[Message]], Awaitable[None]]
"""Handles a batch of messages; returns once their effect is durable."""


async def consume(
    bus: EventBus,
    consumer: Consumer,
    handle: BatchHandler,
    *,
    topic: str,
    retry_s: float = 1.0,
    batch: int = 100,
) -> None:
    """Fetch, handle, then ack ``consumer``'s batches until ``bus`` closes or the task is
    cancelled.

    A batch is acked only after ``handle`` returns, so the bus forgets nothing whose effect
    is not durable. When ``handle`` fails with a TemporaryError (the store or another
    dependency is briefly away) the same batch is handled again after ``retry_s`` seconds,
    until it succeeds: fetching on would leave it pending where, in a group nobody
    reclaims from, it is never delivered again. Any other FlexInferError from ``handle``
    leaves the batch unacked, for reclaim, and the loop fetches on. A failing fetch or ack
    is retried after ``retry_s`` (a batch whose ack failed is not handled again). A closed
    bus answers every fetch at once, so the loop ends when it sees one rather than spin.
    """
    pending: list[Message] = []  # a fetched batch not yet handled
    while True:
        try:
            if not pending:
                pending = await consumer.fetch(max_count=batch, timeout_s=1.0)
                if not pending:
                    if bus.closed:
                        return
                    continue
            try:
                await handle(pending)
            except TemporaryError:
                raise  # keep the batch: it is handled again after the pause
            except FlexInferError:
                pending = []  # give it up, unacked: left for reclaim
                raise
            handled, pending = pending, []
            await consumer.ack(*(m.id for m in handled))
        except FlexInferError as exc:
            if bus.closed:
                return
            log.warning("consumer of %s failed (retrying in %.1f s): %s", topic, retry_s, exc)
            await asyncio.sleep(retry_s)
