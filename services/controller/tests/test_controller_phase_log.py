"""The controller's log tells each phase change once, with its reason."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from flexinfer_common.bus import topics
from flexinfer_controller.core.controller import Controller
from flexinfer_controller.testing import (
    demand,
    eventually,
    fake_model_dir,
    kill_engines,
    model_doc,
    run_controller,
)

LOGGER = "flexinfer_controller.core.reconciler"


@pytest.fixture(autouse=True)
def no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    assert kill_engines(tmp_path) == [], "a test left engines running"


def _lines(caplog: pytest.LogCaptureFixture, model: str) -> list[tuple[int, str]]:
    return [
        (r.levelno, r.getMessage())
        for r in caplog.records
        if r.name == LOGGER and r.getMessage().startswith(f"{model}: ")
    ]


async def _reconcile_again(controller: Controller, key: str, times: int = 10) -> None:
    """Reconcile ``key`` ``times`` more times, each to its end (as resyncs and demand do)."""
    for _ in range(times):
        assert await controller.sync(key)


async def test_each_phase_change_is_told_once_with_its_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    source = fake_model_dir(tmp_path / "m").as_uri()
    async with run_controller(tmp_path) as h:
        await h.put_model(model_doc("tiny", source))
        await h.wait_phase("tiny", "Idle")
        await h.publish(topics.DEMAND, demand())
        await h.wait_phase("tiny", "Ready")
        await eventually(lambda: len(_lines(caplog, "default/tiny")) >= 3)
        await _reconcile_again(h.app.state.controller, "default/tiny")
    lines = _lines(caplog, "default/tiny")
    assert lines[0] == (
        logging.INFO,
        "default/tiny: new → Idle (scaled to zero; the next request activates it)",
    )
    assert lines[1] == (logging.INFO, "default/tiny: Idle → Loading (engine is starting)")
    assert lines[2] == (logging.INFO, "default/tiny: Loading → Ready (1 of 1 replicas ready)")
    assert len(lines) == 3, lines


async def test_a_model_that_cannot_start_says_why_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    missing = (tmp_path / "nowhere").as_uri()
    async with run_controller(tmp_path) as h:
        await h.put_model(model_doc("broken", missing))
        await h.publish(topics.DEMAND, demand("default/broken"))
        await eventually(lambda: len(_lines(caplog, "default/broken")) >= 1)
        model = await h.store.get_model("default", "broken")
        assert model.status.phase == "Pending"
        assert model.status.message
        # Demand keeps coming while requests wait: each reconciles again, and tells nothing.
        await _reconcile_again(h.app.state.controller, "default/broken")
    lines = _lines(caplog, "default/broken")
    assert lines == [(logging.INFO, f"default/broken: new → Pending: {model.status.message}")]
    assert "nowhere" in lines[0][1]
