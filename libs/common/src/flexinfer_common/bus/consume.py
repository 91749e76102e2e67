"""The loop every service runs for a consumer: fetch a batch, handle it, ack it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from flexinfer_common.bus.base import Consumer, EventBus, Message
from flexinfer_common.errors import FlexInferError

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
    is not durable. A FlexInferError from the bus or from ``handle`` is logged and retried
    after ``retry_s`` seconds; the batch it interrupted stays unacked, for redelivery or
    reclaim. A closed bus answers every fetch at once, so the loop ends when it sees one
    rather than spin.
    """
    while True:
        try:
            messages = await consumer.fetch(max_count=batch, timeout_s=1.0)
            if messages:
                await handle(messages)
                await consumer.ack(*(m.id for m in messages))
            elif bus.closed:
                return
        except FlexInferError as exc:
            if bus.closed:
                return
            log.warning("consumer of %s failed (retrying in %.1f s): %s", topic, retry_s, exc)
            await asyncio.sleep(retry_s)
