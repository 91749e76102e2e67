"""LocalRuntime against real subprocesses (the stand-in engine): start, ready, stop, adopt."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from flexinfer_controller.backends import LaunchSpec
from flexinfer_controller.runtime import ReplicaState
from flexinfer_controller.runtime.engine_env import engine_environment
from flexinfer_controller.runtime.local import LocalRuntime, runtime_id
from flexinfer_controller.runtime.statefile import EngineState, StateDir
from flexinfer_controller.testing import (
    ReplicaEvents,
    fake_engine_python,
    fake_model_dir,
    kill_marked,
)


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "data"
    yield path
    kill_marked(runtime_id(path))


def launch(tmp_path: Path, **behaviour: object) -> LaunchSpec:
    model_dir = fake_model_dir(tmp_path / "model", **behaviour)
    python = fake_engine_python(tmp_path / "bin")
    argv = (python, "-m", "flexinfer_engine", "serve", "--model-dir", str(model_dir),
            "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", "0")  # fmt: skip
    return LaunchSpec(argv=argv, served_name="tiny")


def make_runtime(data_dir: Path, events: ReplicaEvents, **kw: float) -> LocalRuntime:
    return LocalRuntime(data_dir=data_dir, listener=events, stop_grace_s=2.0, **kw)


@pytest.fixture
def events() -> ReplicaEvents:
    return ReplicaEvents()


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def marked_sleeper(rid: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env={**os.environ, "FLEXINFER_RUNTIME_ID": rid},
        start_new_session=True,
    )


async def test_start_ready_stop(tmp_path: Path, data_dir: Path, events: ReplicaEvents) -> None:
    runtime = make_runtime(data_dir, events)
    replica = await runtime.start("default/tiny", 1, launch(tmp_path))
    assert replica.state is ReplicaState.STARTING
    state_file = data_dir / "engines" / f"{replica.id}.json"
    assert json.loads(state_file.read_text())["state"] in ("starting", "ready")
    ready = await events.wait("ready")
    assert ready.replica.url is not None
    assert runtime.list("default/tiny")[0].state is ReplicaState.READY
    saved = EngineState.model_validate_json(state_file.read_bytes())
    assert saved.state == "ready"
    assert saved.url == ready.replica.url
    async with httpx.AsyncClient() as client:
        assert (await client.get(ready.replica.url + "/readyz")).status_code == 200
    # The engine leads its own process group (so a terminal's Ctrl-C spares it).
    assert replica.pid is not None
    assert os.getpgid(replica.pid) == replica.pid
    await runtime.stop(replica.id)
    assert runtime.list() == []
    exited = await events.wait("exited")
    assert exited.expected
    assert not psutil.pid_exists(replica.pid)  # reaped, not a zombie
    assert not state_file.exists()
    assert (data_dir / "logs" / f"{replica.id}.log").exists()
    await runtime.close(stop_replicas=True)


async def test_crash_before_ready_is_reported(
    tmp_path: Path, data_dir: Path, events: ReplicaEvents
) -> None:
    runtime = make_runtime(data_dir, events)
    replica = await runtime.start("default/tiny", 1, launch(tmp_path, mode="crash"))
    exited = await events.wait("exited")
    assert not exited.expected
    assert "code 3" in exited.message
    assert "crashing on purpose" in exited.message
    assert replica.pid is not None
    assert not psutil.pid_exists(replica.pid)
    assert runtime.list() == []
    await runtime.close(stop_replicas=True)


async def test_startup_timeout_kills(tmp_path: Path, data_dir: Path, events: ReplicaEvents) -> None:
    runtime = make_runtime(data_dir, events, startup_timeout_s=0.5)
    replica = await runtime.start("default/tiny", 1, launch(tmp_path, mode="never-ready"))
    exited = await events.wait("exited")
    assert not exited.expected
    assert "not ready within" in exited.message
    assert replica.pid is not None
    assert not psutil.pid_exists(replica.pid)
    await runtime.close(stop_replicas=True)


async def test_adopt_after_restart(tmp_path: Path, data_dir: Path, events: ReplicaEvents) -> None:
    first = make_runtime(data_dir, events)
    ready_spec = launch(tmp_path)
    replica = await first.start("default/tiny", 3, ready_spec)
    await events.wait("ready")
    starting = await first.start("default/tiny", 3, launch(tmp_path / "slow", ready_delay_s=30))
    await first.close(stop_replicas=False)
    assert replica.pid is not None
    assert starting.pid is not None
    assert psutil.pid_exists(replica.pid)
    # The starting one was stopped at close: a restarted controller would kill it anyway.
    assert not psutil.pid_exists(starting.pid)

    second_events = ReplicaEvents()
    second = make_runtime(data_dir, second_events)
    adopted = await second.adopt()
    assert [r.id for r in adopted] == [replica.id]
    assert adopted[0].pid == replica.pid
    assert adopted[0].generation == 3
    assert adopted[0].state is ReplicaState.READY
    # An adopted engine's crash is detected although it is watched, not waited for.
    os.kill(replica.pid, signal.SIGKILL)
    exited = await second_events.wait("exited")
    assert not exited.expected
    assert second.list() == []
    await second.close(stop_replicas=True)


async def test_adoption_cleans_dead_unready_and_orphans(
    tmp_path: Path, data_dir: Path, events: ReplicaEvents
) -> None:
    states = StateDir(data_dir / "engines")
    rid = runtime_id(data_dir)
    states.write(EngineState(replica="default_gone-1", pid=dead_pid(), create_time=1.0,
                             model="default/gone", generation=1, state="ready",
                             url="http://127.0.0.1:9", runtime_id=rid))  # fmt: skip
    # A live engine whose /readyz answers 503 is killed, not adopted.
    first = make_runtime(data_dir, events)
    unready = await first.start("default/tiny", 1, launch(tmp_path / "u", mode="unready"))
    await events.wait("ready")
    await first.close(stop_replicas=False)
    # A marked process without a state file (controller died between spawn and write).
    orphan = marked_sleeper(rid)
    try:
        second = make_runtime(data_dir, ReplicaEvents())
        assert await second.adopt() == []
        orphan.wait(timeout=5)  # the adopter reaps its child itself: the code is lost
        assert not psutil.pid_exists(orphan.pid)
        assert unready.pid is not None
        assert not psutil.pid_exists(unready.pid)
        assert list((data_dir / "engines").glob("*.json")) == []
        await second.close(stop_replicas=True)
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait()


async def test_stop_escalates_to_sigkill(
    tmp_path: Path, data_dir: Path, events: ReplicaEvents
) -> None:
    ignore = tmp_path / "bin2"
    ignore.mkdir()
    wrapper = ignore / "stubborn"
    wrapper.write_text(
        "#!/bin/sh\ntrap '' TERM\n"
        f'exec "{sys.executable}" -c "import signal,os,time; signal.signal(signal.SIGTERM, '
        'signal.SIG_IGN); os.write(3, b\'{\\"url\\": \\"http://127.0.0.1:1\\"}\\\\n\'); '
        'time.sleep(60)"\n'
    )
    wrapper.chmod(0o755)
    runtime = LocalRuntime(data_dir=data_dir, listener=events, stop_grace_s=0.3)
    spec = LaunchSpec(argv=(str(wrapper),), served_name="x")
    replica = await runtime.start("default/x", 1, spec)
    await events.wait("ready")
    await runtime.stop(replica.id)
    assert await runtime.wait_stopped(replica.id, 5.0)
    assert replica.pid is not None
    assert not psutil.pid_exists(replica.pid)
    await runtime.close(stop_replicas=True)


def test_engines_inherit_only_an_allow_list_of_the_environment() -> None:
    environ = {
        "PATH": "/usr/bin",
        "LC_ALL": "C.UTF-8",
        "CUDA_VISIBLE_DEVICES": "0",
        "FLEXINFER_ENGINE_LOG_LEVEL": "debug",
        "FLEXINFER_TRANSFER_SELECTOR": "load_aware",
        "FLEXINFER_CONTROLLER_AUTH_TOKEN": "admin-secret-0123456789",
        "FLEXINFER_PROXY_AUTH_TOKENS": '["client-secret"]',
        "FLEXINFER_ENGINE_API_TOKEN": "not-even-in-its-own-family",
        "FLEXINFER_STORE_URL": "postgresql://user:pw@db/flexinfer",
        "AWS_SECRET_ACCESS_KEY": "aws",
        "HF_TOKEN": "hf",
        "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer x",
    }
    env = engine_environment(environ, {"FLEXINFER_RUNTIME_ID": "r1"})
    assert env == {
        "PATH": "/usr/bin",
        "LC_ALL": "C.UTF-8",
        "CUDA_VISIBLE_DEVICES": "0",
        "FLEXINFER_ENGINE_LOG_LEVEL": "debug",
        "FLEXINFER_TRANSFER_SELECTOR": "load_aware",
        "FLEXINFER_RUNTIME_ID": "r1",
    }


async def test_a_started_engine_has_no_secret_of_the_controller(
    tmp_path: Path, data_dir: Path, events: ReplicaEvents, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEXINFER_CONTROLLER_AUTH_TOKEN", "admin-secret-0123456789")
    runtime = make_runtime(data_dir, events)
    replica = await runtime.start("default/tiny", 1, launch(tmp_path))
    await events.wait("ready")
    assert replica.pid is not None
    environ = [f"{k}={v}".encode() for k, v in psutil.Process(replica.pid).environ().items()]
    assert not [v for v in environ if b"admin-secret" in v]
    assert any(v.startswith(b"PATH=") for v in environ)
    await runtime.stop(replica.id)
    await runtime.close(stop_replicas=True)
