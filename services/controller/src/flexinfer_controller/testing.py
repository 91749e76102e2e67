"""Test helpers: serve an app on a real socket, a stand-in engine, and process cleanup.

The stand-in engine is a stdlib-only HTTP server that honours the engine CLI's
``--ready-fd`` contract; it starts in tens of milliseconds, so runtime tests stay fast.
Its behaviour is scripted by ``fake.json`` in the model directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import stat
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psutil
from fastapi import FastAPI
from pydantic import BaseModel

from flexinfer_common.api import Model
from flexinfer_common.bus import Consumer, EventBus, topics
from flexinfer_common.serving import serve_in_background as serve_asgi
from flexinfer_common.settings import StoreSettings
from flexinfer_common.store import ModelStore, create_store
from flexinfer_controller.core.sharing import SharedGPUHook
from flexinfer_controller.runtime.base import ReplicaEvent
from flexinfer_controller.runtime.local import runtime_id
from flexinfer_controller.settings import ControllerSettings

FAKE_ENGINE = r"""
import argparse, json, os, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

p = argparse.ArgumentParser()
p.add_argument("command")
p.add_argument("--model-dir", required=True)
p.add_argument("--served-model-name", required=True)
p.add_argument("--host", default="127.0.0.1")
p.add_argument("--port", type=int, default=0)
p.add_argument("--ready-fd", type=int)
p.add_argument("--lora-root", action="append")  # the engine's LoRA flags, accepted as it does
p.add_argument("--max-loras", type=int)
p.add_argument("--max-lora-rank", type=int)
args = p.parse_args()
try:
    with open(os.path.join(args.model_dir, "fake.json")) as fh:
        cfg = json.load(fh)
except FileNotFoundError:
    cfg = {}
mode = cfg.get("mode", "ok")
if mode == "crash":
    print("fake engine: crashing on purpose", flush=True)
    sys.exit(3)
started = time.time()
in_flight = [0]
counting = threading.Lock()

class H(BaseHTTPRequestHandler):
    def do_POST(self):
        # A streamed completion of max_tokens chunks, token_delay_s apart; it counts in
        # flight (the /metrics gauge) until its last chunk is written.
        size = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(size) or b"{}")
        with counting:
            in_flight[0] += 1
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for i in range(int(body.get("max_tokens", 1))):
                time.sleep(float(cfg.get("token_delay_s", 0.05)))
                chunk = {"object": "text_completion", "choices": [{"index": 0, "text": f"t{i} "}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
        finally:
            with counting:
                in_flight[0] -= 1
    def do_GET(self):
        if self.path == "/readyz" and mode == "unready":
            self.send_response(503); self.end_headers(); return
        if self.path == "/metrics" and os.path.exists(os.path.join(args.model_dir, "metrics.down")):
            self.send_response(503); self.end_headers(); return  # an overloaded engine's page
        if self.path == "/metrics":
            try:  # re-read per scrape: a test changes the engine's readings as it runs
                with open(os.path.join(args.model_dir, "metrics.txt"), "rb") as fh:
                    text = fh.read()
            except FileNotFoundError:
                text = b""
            text += b"" if text.endswith(b"\n") or not text else b"\n"
            text += f"flexinfer_engine_num_requests_running {in_flight[0]}\n".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)
            return
        body = json.dumps({"status": "ok", "pid": os.getpid(), "model": args.served_model_name,
                           "data": [{"id": args.served_model_name, "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass

srv = ThreadingHTTPServer((args.host, args.port), H)
port = srv.server_address[1]
if args.ready_fd is not None and mode != "never-ready":
    time.sleep(float(cfg.get("ready_delay_s", 0)))
    line = {"pid": os.getpid(), "url": f"http://{args.host}:{port}", "port": port,
            "process_start_seconds": time.time() - started, "weight_load_seconds": 0.0}
    os.write(args.ready_fd, (json.dumps(line) + "\n").encode())
    os.close(args.ready_fd)
print("fake engine serving", port, flush=True)
if mode == "die-after-ready":
    time.sleep(float(cfg.get("die_after_s", 0.2)))
    sys.exit(4)
srv.serve_forever()
"""


def fake_engine_python(directory: Path) -> str:
    """An ``engine_python`` that runs the stand-in engine instead of ``-m flexinfer_engine``."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "fake_engine.py"
    script.write_text(FAKE_ENGINE)
    wrapper = directory / "fake-python"
    # The runtime calls "<engine_python> -m flexinfer_engine serve ...": drop "-m NAME".
    wrapper.write_text(f'#!/bin/sh\nshift 2\nexec "{sys.executable}" "{script}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return str(wrapper)


def fake_model_dir(directory: Path, **behaviour: Any) -> Path:
    """A model directory (config.json) whose fake.json scripts the stand-in engine."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text("{}")
    (directory / "fake.json").write_text(json.dumps(behaviour))
    return directory


def marked_pids(marker: str) -> list[int]:
    """Pids of the processes carrying runtime marker ``marker`` (the engines it started)."""
    pids = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("FLEXINFER_RUNTIME_ID") == marker:
                pids.append(proc.pid)
        except psutil.Error:
            continue
    return pids


def engine_pids(tmp_path: Path) -> list[int]:
    """Pids of the engines that ``run_controller(tmp_path)`` started and that still run."""
    return marked_pids(runtime_id(tmp_path / "data"))


def kill_engines(tmp_path: Path) -> list[int]:
    """Kill what ``engine_pids(tmp_path)`` finds (a test's leftovers); their pids."""
    return kill_marked(runtime_id(tmp_path / "data"))


def kill_marked(marker: str) -> list[int]:
    """SIGKILL (and reap) every process carrying runtime marker ``marker``; their pids."""
    killed = marked_pids(marker)
    for pid in killed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for pid in killed:
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).wait(timeout=5)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    return killed


def model_doc(
    name: str,
    source: str,
    *,
    backend: str = "reference",
    idle_timeout: str = "300s",
    **serverless: Any,
) -> dict[str, Any]:
    """A Model document as a client would send it."""
    return {
        "apiVersion": "ai.flexinfer/v1alpha2",
        "kind": "Model",
        "metadata": {"name": name},
        "spec": {
            "backend": backend,
            "source": source,
            "serverless": {"idleTimeout": idle_timeout, **serverless},
        },
    }


def error_of(response_text: str) -> dict[str, object]:
    """The ``error`` object of an OpenAI-style error body, checked to have every field."""
    body = json.loads(response_text)
    assert set(body["error"]) >= {"message", "type", "param", "code"}
    error: dict[str, object] = body["error"]
    return error


def demand(model: str = "default/tiny") -> topics.DemandEvent:
    """A DemandEvent for ``model`` as a proxy with one queued request sends it."""
    return topics.DemandEvent(model=model, queue_depth=1, since=datetime.now(UTC), proxy="test")


class ReplicaEvents:
    """Collects a runtime's ReplicaEvents (use it as the listener); a test waits for one."""

    def __init__(self) -> None:
        self.items: list[ReplicaEvent] = []
        self._changed = asyncio.Event()

    def __call__(self, event: ReplicaEvent) -> None:
        self.items.append(event)
        self._changed.set()

    async def wait(self, kind: str, timeout_s: float = 10.0) -> ReplicaEvent:
        """The next event of ``kind`` (taken from the list); TimeoutError after ``timeout_s``."""
        async with asyncio.timeout(timeout_s):
            while True:
                for event in self.items:
                    if event.kind == kind:
                        self.items.remove(event)
                        return event
                self._changed.clear()
                await self._changed.wait()


class Harness:
    """A running controller app on a MemoryBus and a SQLite store, with test probes."""

    def __init__(
        self,
        url: str,
        client: httpx.AsyncClient,
        app: FastAPI,
        store: ModelStore,
        bus: EventBus,
        probe: Consumer,
    ) -> None:
        self.url = url
        self.client = client
        self.app = app
        self.store = store
        self.bus = bus
        self._probe = probe

    async def put_model(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Apply a Model document through the admin API (201 or 200); the stored Model."""
        response = await self.client.put(f"/v1/admin/models/{doc['metadata']['name']}", json=doc)
        assert response.status_code in (200, 201), response.text
        body: dict[str, Any] = response.json()
        return body

    async def publish(self, topic: str, event: BaseModel) -> None:
        """Publish a bus event as a proxy would."""
        await self.bus.publish(topic, event.model_dump(mode="json"))

    async def endpoints_event(
        self, model: str, timeout_s: float = 10.0, *, count: int | None = None
    ) -> topics.EndpointsEvent:
        """The next EndpointsEvent of ``model`` (with ``count`` endpoints, if given)."""
        async with asyncio.timeout(timeout_s):
            while True:
                for message in await self._probe.fetch(timeout_s=0.2):
                    await self._probe.ack(message.id)
                    event = topics.EndpointsEvent.model_validate(message.payload)
                    if event.model == model and count in (None, len(event.endpoints)):
                        return event

    async def wait_phase(self, name: str, phase: str, timeout_s: float = 10.0) -> Model:
        """Poll the store until a reconcile of the Model's current spec set ``phase``.

        A new Model is Pending before any reconcile: a status the controller wrote carries
        the generation it observed, so an unreconciled one is never taken for an answer.
        """
        model = None
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    model = await self.store.get_model("default", name)
                    observed = model.status.observed_generation
                    if model.status.phase == phase and observed == model.metadata.generation:
                        return model
                    await asyncio.sleep(0.02)
        except TimeoutError:
            status = model.status.model_dump(mode="json") if model else None
            raise AssertionError(f"{name} never reached {phase}; last status {status}") from None


@asynccontextmanager
async def run_controller(
    tmp_path: Path,
    *,
    store: Any = None,
    bus: Any = None,
    shared_gpu: SharedGPUHook | None = None,
    **overrides: Any,
) -> AsyncIterator[Harness]:
    """Run the controller app (fake engine, fast timings) until the block ends."""
    import httpx

    from flexinfer_common.bus import topics
    from flexinfer_common.bus.memory import MemoryBus
    from flexinfer_controller.app import create_app

    values: dict[str, Any] = {
        "port": 0,
        "data_dir": tmp_path / "data",
        "engine_python": fake_engine_python(tmp_path / "bin"),
        "stop_grace_s": 2.0,
        "stop_engines_on_shutdown": True,
        "crash_backoff_initial_s": 0.05,
        "crash_backoff_max_s": 0.2,
        "crash_loop_limit": 3,
        "engine_startup_timeout_s": 20.0,
    }
    values.update(overrides)
    settings = ControllerSettings(**values)
    own_store = store is None
    own_bus = bus is None
    store = store or create_store(StoreSettings(url=f"sqlite:///{tmp_path / 'store.db'}"))
    bus = bus or MemoryBus()
    probe = bus.consumer(topics.ENDPOINTS, f"probe-{os.urandom(3).hex()}", "probe")
    app = create_app(settings, bus=bus, store=store, shared_gpu=shared_gpu)
    try:
        async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
            yield Harness(url, client, app, store, bus, probe)
    finally:
        if own_store:
            await store.close()
        if own_bus:
            await bus.close()


async def eventually(
    check: Callable[[], bool | Awaitable[bool]], timeout_s: float = 5.0, interval_s: float = 0.02
) -> None:
    """Poll ``check`` until it holds; AssertionError after ``timeout_s``."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout_s}s")
        await asyncio.sleep(interval_s)
