"""Cold-start progress: the phases a cold start publishes on the bus, in order, once each."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from flexinfer_common.bus import Consumer, topics
from flexinfer_common.bus.memory import MemoryBus
from flexinfer_common.errors import BusError
from flexinfer_controller.core.progress import ProgressReporter
from flexinfer_controller.testing import demand, fake_model_dir, kill_engines, model_doc
from flexinfer_controller.testing import run_controller as run_harness


@pytest.fixture(autouse=True)
def no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    assert kill_engines(tmp_path) == [], "a test left engines running"


@pytest.fixture
async def bus() -> AsyncIterator[MemoryBus]:
    memory = MemoryBus()
    yield memory
    await memory.close()


async def phases_until(
    consumer: Consumer, last: str, timeout_s: float = 10.0
) -> list[topics.ProgressEvent]:
    """ProgressEvents as a proxy receives them, up to and including phase ``last``."""
    events: list[topics.ProgressEvent] = []
    async with asyncio.timeout(timeout_s):
        while not events or events[-1].phase != last:
            for message in await consumer.fetch(timeout_s=0.2):
                await consumer.ack(message.id)
                events.append(topics.ProgressEvent.model_validate(message.payload))
    return events


async def drain(consumer: Consumer, wait_s: float = 0.3) -> list[str]:
    """Phases published within ``wait_s`` (to assert that nothing more came)."""
    messages = await consumer.fetch(timeout_s=wait_s)
    await consumer.ack(*(m.id for m in messages))
    return [topics.ProgressEvent.model_validate(m.payload).phase for m in messages]


async def test_cold_start_phases_arrive_in_order_with_eta_from_previous_start(
    tmp_path: Path, bus: MemoryBus
) -> None:
    source = fake_model_dir(tmp_path / "m", ready_delay_s=0.3).as_uri()
    progress = bus.consumer(topics.PROGRESS, "proxy-test", "p")
    async with run_harness(tmp_path, bus=bus) as h:
        await h.put_model(model_doc("tiny", source, idle_timeout="1s"))
        await h.wait_phase("tiny", "Idle")
        assert await drain(progress) == [], "an idle model has no cold start"

        await h.publish(topics.DEMAND, demand())
        first = await phases_until(progress, "ready")
        assert [e.phase for e in first] == ["scheduled", "loading-weights", "ready"]
        assert all(e.model == "default/tiny" and e.source == "controller" for e in first)
        assert [e.at for e in first] == sorted(e.at for e in first)
        assert first[1].eta_s is None, "no previous start: no honest estimate"
        # The endpoint is published before the proxy hears "ready".
        assert len((await h.endpoints_event("default/tiny", count=1)).endpoints) == 1

        # More demand while it serves is no cold start: nothing more is published.
        await h.publish(topics.DEMAND, demand())
        assert await drain(progress) == []

        # Idle timeout: back to zero; the next cold start estimates from the first one.
        await h.endpoints_event("default/tiny", timeout_s=5, count=0)
        await h.wait_phase("tiny", "Idle")
        await h.publish(topics.DEMAND, demand())
        second = await phases_until(progress, "ready")
        assert [e.phase for e in second] == ["scheduled", "loading-weights", "ready"]
        eta = second[1].eta_s
        assert eta is not None
        assert 0.3 <= eta < 10, eta


async def test_pulling_while_the_weights_are_missing(tmp_path: Path, bus: MemoryBus) -> None:
    model_dir = tmp_path / "later"
    progress = bus.consumer(topics.PROGRESS, "proxy-test", "p")
    async with run_harness(tmp_path, bus=bus) as h:
        await h.put_model(model_doc("tiny", model_dir.as_uri()))
        await h.wait_phase("tiny", "Pending")
        assert await drain(progress) == [], "no demand: nothing is being started"

        await h.publish(topics.DEMAND, demand())
        assert [e.phase for e in await phases_until(progress, "pulling")] == [
            "scheduled",
            "pulling",
        ]
        await h.publish(topics.DEMAND, demand())
        assert await drain(progress) == [], "still pulling: no repeats"

        fake_model_dir(model_dir)
        await h.publish(topics.DEMAND, demand())
        rest = await phases_until(progress, "ready")
        assert [e.phase for e in rest] == ["loading-weights", "ready"]


class FailingProgressBus(MemoryBus):
    """A bus whose progress topic is down; everything else works."""

    async def publish(self, topic: str, payload: Mapping[str, Any]) -> str:
        if topic == topics.PROGRESS:
            raise BusError("progress stream unavailable")
        return await super().publish(topic, payload)


async def test_a_failing_progress_publish_does_not_stop_activation(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = fake_model_dir(tmp_path / "m").as_uri()
    broken = FailingProgressBus()
    try:
        async with run_harness(tmp_path, bus=broken) as h:
            await h.put_model(model_doc("tiny", source))
            await h.publish(topics.DEMAND, demand())
            await h.endpoints_event("default/tiny", count=1)
            await h.wait_phase("tiny", "Ready")
    finally:
        await broken.close()
    assert "could not publish progress" in caplog.text


class StuckBus(MemoryBus):
    """A bus whose publish never returns (a hung connection)."""

    async def publish(self, topic: str, payload: Mapping[str, Any]) -> str:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_reporter_never_blocks_its_caller_and_closes_when_stuck() -> None:
    stuck = StuckBus()
    reporter = ProgressReporter(stuck)
    reporter.scheduled("default/m")  # returns at once although the bus hangs
    reporter.loading("default/m")
    assert reporter.phase("default/m") == "loading-weights"
    async with asyncio.timeout(2):
        await reporter.close(timeout_s=0.05)
    await stuck.close()


async def test_reporter_phases_only_move_forward(bus: MemoryBus) -> None:
    consumer = bus.consumer(topics.PROGRESS, "g", "c")
    reporter = ProgressReporter(bus)
    reporter.ready("default/m", 1.0)  # no cold start known: nothing to report
    reporter.pulling("default/m")  # implies scheduled first
    reporter.scheduled("default/m")
    reporter.pulling("default/m")
    reporter.loading("default/m")
    reporter.scheduled("default/m")
    reporter.ready("default/m", 2.5)
    assert not reporter.active("default/m")
    reporter.scheduled("default/other")
    reporter.abandon("default/other")
    reporter.scheduled("default/other")  # a new start after abandoning reports again
    await reporter.close()
    events = [topics.ProgressEvent.model_validate(m.payload) for m in await consumer.fetch()]
    assert [(e.model, e.phase) for e in events] == [
        ("default/m", "scheduled"),
        ("default/m", "pulling"),
        ("default/m", "loading-weights"),
        ("default/m", "ready"),
        ("default/other", "scheduled"),
        ("default/other", "scheduled"),
    ]
    assert events[3].eta_s == 0
    assert reporter.last_duration("default/m") == 2.5
    reporter.loading("default/m")
    assert reporter.phase("default/m") == "loading-weights"
    reporter.forget("default/m")
    assert reporter.last_duration("default/m") is None
    assert not reporter.active("default/m")
