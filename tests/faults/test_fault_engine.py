"""Engines SIGKILLed under a distributed stack: while loading weights, mid-stream, idle.

One stack (``flexinfer controller`` and ``flexinfer proxy`` sharing the real Redis and
PostgreSQL) serves the module; each test declares its own Model, so one test's crashes do
not lengthen another's crash backoff, and deletes it at the end. Clients are the openai SDK
through the proxy; every call's outcome is counted.
"""

from __future__ import annotations

import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import psutil
import pytest

from flexinfer_testing import faultlog
from flexinfer_testing.clients import Call, tally, wait_until
from flexinfer_testing.engines import engine_state, listening_url, many_shard_model
from flexinfer_testing.stack import Stack, stack_factory

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Iterator[Stack]:
    """A distributed stack for the module; RSS of its processes is logged before and after."""
    root = tmp_path_factory.mktemp("engine-faults")
    with stack_factory("distributed", root, tiny_model_dir) as factory:
        stack = factory.start()
        before = {name: faultlog.rss_mib(p.pid) for name, p in stack.procs.items()}
        yield stack
        after = {name: faultlog.rss_mib(p.pid) for name, p in stack.procs.items()}
        faultlog.record(
            "(engine fault module: proxy and controller RSS)", "-", None,
            rss_mib={f"{name} before/after": f"{before[name]}/{after[name]}" for name in after},
        )  # fmt: skip


@pytest.fixture(scope="module")
def sharded_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model of ~1800 shard files: an engine stays in its loading state long enough."""
    return many_shard_model(tmp_path_factory.mktemp("sharded") / "sharded", layers=150)


def engines_of(stack: Stack, model: str) -> list[psutil.Process]:
    """Engine processes serving ``model`` (its name is the served name on the command line)."""
    return [p for p in stack.all_engine_processes() if model in (p.info["cmdline"] or [])]


def accepts(url: str) -> bool:
    """Whether something still accepts TCP connections at ``url``'s port."""
    port = int(url.rsplit(":", 1)[1])
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def delete(stack: Stack, model: str) -> None:
    """Delete the Model; its engines stop."""
    response = httpx.delete(f"{stack.urls['controller']}/v1/admin/models/{model}", timeout=60)
    assert response.status_code in (204, 404), response.text
    wait_until(lambda: not engines_of(stack, model), 30, f"the engines of {model} to stop")


def still_loading(url: str) -> bool:
    """True once the engine at ``url`` reports ``loading``; an error if it is ready first."""
    state = engine_state(url)
    if state == "ready":
        raise AssertionError("the engine finished loading before it could be caught loading")
    return state == "loading"


def replica_of(stack: Stack, pid: int) -> str:
    """The replica id of engine ``pid`` from its state file."""
    for state in stack.engine_states():
        if state["pid"] == pid:
            return str(state["replica"])
    raise AssertionError(f"no state file for engine pid {pid}")


def test_an_engine_killed_while_loading_its_weights_is_restarted(
    stack: Stack, sharded_template: Path
) -> None:
    """Injected: SIGKILL of the engine while its /engine/info reports ``loading`` (weights
    half read, no ready line yet), with the cold-start request that started it waiting.

    Asserted: that request is answered 200 once the controller's restart is ready (one
    call, one 200); exactly one engine runs afterwards, and the killed one never logged a
    finished load.
    """
    model = "fault-load"
    sharded = stack.data_dir / "models" / model
    shutil.copytree(sharded_template, sharded)
    stack.apply_model(model, model_dir=sharded)
    call = Call(stack.base_url, model, max_tokens=1).start()
    (engine,) = wait_until(lambda: engines_of(stack, model), 60, "the engine to be spawned")
    url = listening_url(engine.pid, 60)
    wait_until(lambda: still_loading(url), 60, "the engine to report loading", poll_s=0.01)
    replica = replica_of(stack, engine.pid)
    engine.kill()
    killed_at = time.monotonic()
    engine.wait(10)
    call.join()
    recovery = call.ended - killed_at
    engines = engines_of(stack, model)
    faultlog.record(
        "engine SIGKILL while loading weights (cold-start request waiting)",
        tally([call]), recovery, engines_after=len(engines),
    )  # fmt: skip
    assert call.outcome == "200", repr(call.error)
    assert "loaded" not in stack.engine_log(replica), "the kill landed after the load finished"
    assert [p.pid for p in engines] != [engine.pid]
    assert len(engines) == 1
    delete(stack, model)


def test_an_engine_killed_mid_stream_ends_the_stream_with_an_error(stack: Stack) -> None:
    """Injected: SIGKILL of the engine while a streaming chat completion through the proxy
    is half delivered.

    Asserted: the stream ends with an openai.APIError (not a hang, not a silent end);
    the next request is answered 200 once the controller has restarted the engine.
    """
    model = "fault-stream"
    stack.apply_model(model)
    warm = Call(stack.base_url, model, max_tokens=1).run()
    assert warm.outcome == "200", repr(warm.error)
    (engine,) = engines_of(stack, model)
    url = listening_url(engine.pid, 30)
    stream = Call(
        stack.base_url, model, stream=True, max_tokens=400, timeout_s=60,
        extra={"temperature": 0.8, "seed": 1},
    ).start()  # fmt: skip
    wait_until(lambda: stream.chunks >= 3, 30, "the stream to be under way")
    engine.kill()
    killed_at = time.monotonic()
    stream.join(30)
    # Until the kernel has torn the killed process down, its port can still take a
    # connection and then reset it: the proxy answers that request 502, rightly, since it
    # cannot tell whether the engine ran it. The next request is the one sent after.
    wait_until(lambda: not accepts(url), 30, "the killed engine's port to close")
    after = Call(stack.base_url, model, max_tokens=4).run()
    faultlog.record(
        "engine SIGKILL mid-stream",
        f"stream: {stream.outcome} after {stream.chunks} chunks, "
        f"{stream.ended - killed_at:.2f}s after the kill; next request: {after.outcome}",
        after.ended - killed_at,
    )
    assert isinstance(stream.error, openai.APIError), repr(stream.error)
    assert stream.ended - killed_at < 15, "the cut stream must end, not hang"
    assert after.outcome == "200", repr(after.error)
    assert [p.pid for p in engines_of(stack, model)] != [engine.pid]
    delete(stack, model)


def test_an_idle_engine_killed_is_replaced_for_the_next_request(stack: Stack) -> None:
    """Injected: SIGKILL of a ready engine with no request in flight.

    Asserted: requests sent right after the kill (three, one after another) are all
    answered 200 once the controller has replaced the engine; one engine runs afterwards.
    """
    model = "fault-idle"
    stack.apply_model(model)
    warm = Call(stack.base_url, model, max_tokens=1).run()
    assert warm.outcome == "200", repr(warm.error)
    (engine,) = engines_of(stack, model)
    engine.kill()
    killed_at = time.monotonic()
    engine.wait(10)
    calls = [Call(stack.base_url, model, max_tokens=4).run() for _ in range(3)]
    engines = engines_of(stack, model)
    faultlog.record(
        "engine SIGKILL while idle, then 3 requests",
        tally(calls), calls[0].ended - killed_at, engines_after=len(engines),
    )  # fmt: skip
    assert [c.outcome for c in calls] == ["200"] * 3, [repr(c.error) for c in calls]
    assert len(engines) == 1
    assert engines[0].pid != engine.pid
    delete(stack, model)
