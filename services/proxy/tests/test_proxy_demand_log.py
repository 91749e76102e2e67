"""The demand re-sent every couple of seconds is logged once per waiting count, not each time."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import httpx
import pytest

from flexinfer_common.bus import Consumer, topics
from flexinfer_proxy.testing import make_model
from flexinfer_proxy.testing_stack import proxy_stack, wait_until

LOGGER = "flexinfer_proxy.core.service"


async def _demands(consumer: Consumer, count: int) -> None:
    """Wait until ``count`` more demand events were published."""
    seen = 0
    async with asyncio.timeout(10):
        while seen < count:
            for message in await consumer.fetch(timeout_s=0.5):
                await consumer.ack(message.id)
                seen += 1


def _told(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == LOGGER and r.levelno == level and r.getMessage().startswith("demand for")
    ]


async def test_repeated_demand_is_debug_and_a_new_count_is_info(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    body = {"model": "tiny", "messages": []}
    async with (
        proxy_stack(tmp_path, [make_model("tiny")], demand_resend_interval_s=0.05) as stack,
        httpx.AsyncClient(timeout=30) as client,
    ):
        demands = stack.bus.consumer(topics.DEMAND, "log-test", "t")
        url = f"{stack.url}/v1/chat/completions"
        first = asyncio.create_task(client.post(url, json=body))
        await _demands(demands, 5)
        second = asyncio.create_task(client.post(url, json=body))
        await wait_until(lambda: stack.core.queue.depth("default/tiny") == 2)
        await _demands(demands, 5)
        for waiting in (first, second):
            waiting.cancel()
        await asyncio.gather(first, second, return_exceptions=True)
    assert _told(caplog, logging.INFO) == [
        "demand for default/tiny (1 waiting)",
        "demand for default/tiny (2 waiting)",
    ]
    assert len(_told(caplog, logging.DEBUG)) >= 7
