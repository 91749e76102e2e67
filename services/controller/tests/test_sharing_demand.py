"""The DemandBook (core/sharing/demand.py): queue depth and queue-since per Model from
the proxies' events, on a simulated clock."""

from __future__ import annotations

from datetime import UTC, datetime

from flexinfer_common.bus.topics import ActivityEvent, DemandEvent
from flexinfer_controller.core.sharing.clock import ManualClock
from flexinfer_controller.core.sharing.demand import DemandBook, Queue


def test_depth_adds_over_proxies_and_since_is_the_earliest() -> None:
    clock = ManualClock(100.0)
    book = DemandBook(clock)
    book.queued("d/a", 2, "p1")
    clock.advance(5)
    book.queued("d/a", 3, "p2")
    book.queued("d/a", 4, "p1")
    assert book.queue("d/a", 120.0) == Queue(7, 100.0)
    assert book.last_demand("d/a") == 105.0


def test_a_queue_not_repeated_within_the_window_no_longer_counts() -> None:
    clock = ManualClock()
    book = DemandBook(clock)
    book.queued("d/a", 1, "p1")
    clock.advance(120)
    assert book.queue("d/a", 120.0) == Queue(1, 0.0)
    clock.advance(1)
    assert book.queue("d/a", 120.0) is None


def test_serving_or_an_empty_report_drains_the_queue() -> None:
    clock = ManualClock()
    book = DemandBook(clock)
    book.queued("d/a", 1, "p1")
    book.queued("d/a", 0, "p1")
    assert book.queue("d/a", 60.0) is None
    book.queued("d/a", 1, "p1")
    clock.advance(3)
    book.served("d/a")
    assert book.queue("d/a", 60.0) is None
    assert book.last_demand("d/a") == 3.0


def test_bus_events_feed_the_book() -> None:
    clock = ManualClock(10.0)
    book = DemandBook(clock)
    now = datetime.now(UTC)
    book.observe(DemandEvent(model="a", queue_depth=2, since=now, proxy="p"), "d/a")
    assert book.queue("d/a", 60.0) == Queue(2, 10.0)
    book.observe(ActivityEvent(model="a", at=now, active=1), "d/a")
    assert book.queue("d/a", 60.0) is None
    book.forget("d/a")
    assert book.last_demand("d/a") is None
