"""Bus consumers of the shared ``controller`` group: demand and activity events."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from pydantic import BaseModel, ValidationError

from flexinfer_common.bus import Consumer, EventBus, Message, consume
from flexinfer_common.errors import BusError

log = logging.getLogger(__name__)

CONSUMER_GROUP = "controller"
"""Shared by controller replicas: each event is handled by one of them."""

Handler = Callable[[list[BaseModel]], Awaitable[None]]
"""Handles a batch of parsed events; returns once their effect is durable."""


class EventLoop:
    """Fetches one topic's events for the group, handles them, then acks them."""

    def __init__(
        self,
        bus: EventBus,
        topic: str,
        event_type: type[BaseModel],
        handler: Handler,
        *,
        name: str,
        reclaim_idle_s: float,
    ) -> None:
        self._bus = bus
        self._topic = topic
        self._event_type = event_type
        self._handler = handler
        self._reclaim_idle_s = reclaim_idle_s
        # Created now, not in run(): the group must exist before anyone publishes.
        self._consumer: Consumer = bus.consumer(topic, CONSUMER_GROUP, name)

    async def reclaim(self) -> None:
        """Handle events another (dead) replica fetched but never acked."""
        try:
            messages = await self._consumer.reclaim(self._reclaim_idle_s)
        except BusError as exc:
            log.warning("reclaim on %s failed: %s", self._topic, exc)
            return
        if not messages:
            return
        log.info("reclaimed %d stale %s events", len(messages), self._topic)
        await self._handle(messages)
        try:
            await self._consumer.ack(*(m.id for m in messages))
        except BusError as exc:
            log.warning("ack on %s failed (events will be redelivered): %s", self._topic, exc)

    async def run(self) -> None:
        """Reclaim, then fetch and handle until cancelled or the bus closes."""
        await self.reclaim()
        await consume(self._bus, self._consumer, self._handle, topic=self._topic)

    async def _handle(self, messages: list[Message]) -> None:
        events: list[BaseModel] = []
        for message in messages:
            try:
                events.append(self._event_type.model_validate(message.payload))
            except ValidationError as exc:
                # A malformed event never becomes valid: ack it so it is not redelivered forever.
                log.warning("dropping malformed %s event %s: %s", self._topic, message.id, exc)
        if events:
            await self._handler(events)
