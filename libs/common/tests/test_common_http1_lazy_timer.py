"""LazyTimer: one handle for a deadline that moves on every request."""

from __future__ import annotations

import asyncio

from flexinfer_common.http1.lazy_timer import LazyTimer

DELAY = 0.02


async def test_expires_once_after_the_latest_start() -> None:
    """Moving the deadline postpones the call; it comes once, after the last start."""
    loop = asyncio.get_running_loop()
    fired: list[float] = []
    done = asyncio.Event()

    def expired() -> None:
        fired.append(loop.time())
        done.set()

    timer = LazyTimer(loop, DELAY, expired)
    timer.start()
    timer.start()
    last = loop.time()
    timer.start()
    await asyncio.wait_for(done.wait(), 5)
    assert len(fired) == 1
    assert fired[0] >= last + DELAY - 0.001  # loop clock resolution


async def test_stop_and_cancel_keep_it_from_firing() -> None:
    """A stopped or cancelled timer never calls back; a later one on the same loop does."""
    loop = asyncio.get_running_loop()
    calls: list[str] = []
    witness = asyncio.Event()
    stopped = LazyTimer(loop, DELAY, lambda: calls.append("stopped"))
    cancelled = LazyTimer(loop, DELAY, lambda: calls.append("cancelled"))
    later = LazyTimer(loop, DELAY * 3, witness.set)
    stopped.start()
    cancelled.start()
    later.start()
    stopped.stop()
    cancelled.cancel()
    await asyncio.wait_for(witness.wait(), 5)
    assert calls == []


async def test_restart_after_stop_fires_again() -> None:
    """stop then start arms a fresh deadline on the handle still pending."""
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    timer = LazyTimer(loop, DELAY, done.set)
    timer.start()
    timer.stop()
    timer.start()
    await asyncio.wait_for(done.wait(), 5)
