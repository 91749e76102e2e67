"""Pure logic: desired replicas, the work queue, crash backoff, sources, backends, settings."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from flexinfer_common.api import ModelSpec
from flexinfer_controller.__main__ import build_settings
from flexinfer_controller.backends import default_backends
from flexinfer_controller.core.crashes import CrashTracker
from flexinfer_controller.core.desired import busy_until, desired_replicas
from flexinfer_controller.core.queue import ShutDownError, WorkQueue
from flexinfer_controller.core.sources import SourceState, resolve_source
from flexinfer_controller.runtime.base import Replica, ReplicaState

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def spec(**serverless: Any) -> ModelSpec:
    body: dict[str, Any] = {"backend": "reference", "source": "file:///m"}
    if serverless:
        body["serverless"] = serverless
    return ModelSpec.model_validate(body)


@pytest.mark.parametrize(
    ("serverless", "idle_for_s", "want", "expires"),
    [
        ({}, None, 0, False),  # serverless on by default, never active: idle
        ({}, 10, 1, True),  # active 10 s ago, idleTimeout 300 s
        ({}, 299, 1, True),
        ({}, 300, 0, False),  # exactly at the timeout: idle
        ({}, 1000, 0, False),
        ({"minReplicas": 1}, None, 1, False),  # floor holds: no expiry to schedule
        ({"minReplicas": 1}, 10, 1, False),
        ({"minReplicas": 2, "maxReplicas": 3}, 10, 2, False),
        ({"scaleToZero": False}, None, 1, False),
        ({"enabled": False}, None, 1, False),
        ({"enabled": False, "minReplicas": 2, "maxReplicas": 2}, None, 2, False),
        ({"idleTimeout": "1s"}, 0.5, 1, True),
        ({"idleTimeout": "1s"}, 1.5, 0, False),
        ({"idleTimeout": "0s"}, 0, 0, False),
    ],
)  # fmt: skip
def test_desired_replicas(
    serverless: dict[str, Any], idle_for_s: float | None, want: int, expires: bool
) -> None:
    last = None if idle_for_s is None else NOW - timedelta(seconds=idle_for_s)
    desired = desired_replicas(spec(**serverless), last, NOW)
    assert desired.replicas == want
    assert (desired.idle_at is not None) == expires
    if expires:
        assert last is not None
        assert desired.idle_at == last + spec(**serverless).serverless_or_default.idle_timeout


async def test_queue_dedups_and_requeues_in_flight_keys() -> None:
    queue = WorkQueue()
    queue.add("a")
    queue.add("b")
    queue.add("a")
    assert len(queue) == 2
    key = await queue.get()
    assert key == "a"
    ticket = queue.add("a")  # added while processing: not handed out twice at once
    assert await queue.get() == "b"
    assert len(queue) == 0
    queue.done("b")
    waiter = asyncio.create_task(queue.wait_done("a", ticket, 5))
    queue.done("a")
    assert await queue.get() == "a"  # requeued after the first processing ended
    assert not waiter.done()  # the ticket was taken by the second processing only
    queue.done("a")
    assert await waiter
    queue.shut_down()
    with pytest.raises(ShutDownError):
        await queue.get()


async def test_queue_add_after_keeps_earliest() -> None:
    queue = WorkQueue()
    queue.add_after("a", 0.05)
    queue.add_after("a", 10)  # later: ignored, the earlier one will reconcile anyway
    queue.add_after("b", 10)
    queue.add_after("b", 0.02)  # earlier: replaces
    got = [await asyncio.wait_for(queue.get(), 1), await asyncio.wait_for(queue.get(), 1)]
    assert sorted(got) == ["a", "b"]
    queue.shut_down()


def test_crash_tracker_backoff_and_loop() -> None:
    tracker = CrashTracker(initial_s=1, max_s=4, limit=3, window_s=60)
    assert tracker.restart_delay("m", 1, 0) == 0
    tracker.record("m", 1, 0, "boom")
    assert tracker.restart_delay("m", 1, 0) == 1
    assert tracker.restart_delay("m", 1, 0.5) == 0.5
    tracker.record("m", 1, 1)
    assert tracker.restart_delay("m", 1, 1) == 2
    assert tracker.crash_looping("m", 1, 1) == 0
    tracker.record("m", 1, 3)
    assert tracker.crash_looping("m", 1, 3) == 3
    assert tracker.crash_looping("m", 2, 3) == 0  # a new spec starts afresh
    assert tracker.crash_looping("m", 1, 100) == 0  # crashes age out of the window


def test_sources(tmp_path: Path) -> None:
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "config.json").write_text("{}")
    (tmp_path / "empty").mkdir()
    assert resolve_source((tmp_path / "ok").as_uri()).state is SourceState.READY
    assert resolve_source((tmp_path / "ok").as_uri()).path == tmp_path / "ok"
    assert resolve_source((tmp_path / "empty").as_uri()).state is SourceState.PENDING
    assert resolve_source((tmp_path / "none").as_uri()).state is SourceState.PENDING
    assert resolve_source("file://host/x").state is SourceState.INVALID
    assert resolve_source("HF://org/model").state is SourceState.REMOTE
    assert resolve_source("s3://bucket/prefix").state is SourceState.REMOTE
    assert resolve_source("oci://registry/model:1").state is SourceState.REMOTE
    pending = resolve_source("oras://registry/model:1")
    assert pending.state is SourceState.PENDING
    assert "registry fetches" in pending.message


def test_backend_registry() -> None:
    registry = default_backends()
    names = ["reference", "vllm", "ollama", "mlc-llm", "mlc", "llama.cpp", "llama_cpp",
             "diffusers", "comfyui", "comfy-ui", "vllm-omni", "vllm-diffusion", "VLLM"]  # fmt: skip
    for name in names:
        assert registry.get(name) is not None, name
    assert registry.get("llama-cpp") is registry.get("llamacpp")
    assert registry.get("nope") is None
    assert "reference" in registry.names()


def test_main_flags_override_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEXINFER_CONTROLLER_PORT", "9999")
    monkeypatch.setenv("FLEXINFER_CONTROLLER_RESYNC_INTERVAL_S", "2.5")
    settings = build_settings(["--port", "0", "--data-dir", str(tmp_path)])
    assert settings.port == 0
    assert settings.data_dir == tmp_path
    assert settings.resync_interval_s == 2.5
    assert settings.stop_engines_on_shutdown is False


def _replica(state: ReplicaState, ready_at: float | None = None) -> Replica:
    return Replica(id="r", model="default/tiny", generation=1, state=state, ready_at=ready_at)


def test_busy_until_is_the_last_request_without_replicas() -> None:
    last = NOW - timedelta(minutes=3)
    assert busy_until(last, []) == last
    assert busy_until(None, []) is None


def test_a_starting_replica_keeps_the_model_busy() -> None:
    last = datetime.now(UTC) - timedelta(hours=1)
    busy = busy_until(last, [_replica(ReplicaState.STARTING)])
    assert busy is not None
    assert busy > datetime.now(UTC) - timedelta(seconds=5)


def test_the_idle_clock_restarts_when_a_replica_becomes_ready() -> None:
    last = NOW - timedelta(minutes=10)
    ready_at = NOW - timedelta(seconds=30)
    replica = _replica(ReplicaState.READY, ready_at=ready_at.timestamp())
    assert busy_until(last, [replica]) == ready_at
    later = NOW - timedelta(seconds=5)
    assert busy_until(later, [replica]) == later
