"""Start whole FlexInfer stacks as subprocesses, the way a user would.

``embedded``: one ``flexinfer up --port 0`` process. ``distributed``: ``flexinfer controller``
and ``flexinfer proxy`` as separate processes sharing the real Redis and PostgreSQL.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from flexinfer_testing.services import postgres_database, require_redis

START_TIMEOUT_S = 60.0


def flexinfer_command(*args: str) -> list[str]:
    """``flexinfer ARGS`` run with this interpreter."""
    return [sys.executable, "-m", "flexinfer_cli", *args]


def wait_for_file(path: Path, proc: subprocess.Popen[bytes], timeout: float) -> dict[str, str]:
    """The JSON a starting process writes at ``path`` once it serves."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            data: dict[str, str] = json.loads(path.read_text())
            return data
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode} before it was ready")
        time.sleep(0.05)
    raise TimeoutError(f"{path} did not appear within {timeout}s")


def stop_process(
    proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 20
) -> int:
    """Signal ``proc`` and wait for it (SIGKILL after ``timeout``)."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return proc.returncode


@dataclass
class Stack:
    """A running stack: where its services listen and how to reach its engines."""

    mode: str
    data_dir: Path
    model_dir: Path
    env: dict[str, str]
    urls: dict[str, str] = field(default_factory=dict)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        """The proxy's OpenAI base URL (…/v1)."""
        return f"{self.urls['proxy']}/v1"

    def apply_model(
        self, name: str, *, model_dir: Path | None = None, **serverless: Any
    ) -> dict[str, Any]:
        """Declare a reference-backend Model on this stack's tiny model (or ``model_dir``)."""
        return self.apply(
            name,
            {
                "backend": "reference",
                "source": (model_dir or self.model_dir).as_uri(),
                "gpu": {"vendor": "cpu"},
                "serverless": {"minReplicas": 0, **serverless},
            },
        )

    def apply(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        """Create or replace the Model ``name`` with ``spec`` through the admin API."""
        manifest = {
            "apiVersion": "ai.flexinfer/v1alpha2",
            "kind": "Model",
            "metadata": {"name": name},
            "spec": spec,
        }
        response = httpx.put(
            f"{self.urls['controller']}/v1/admin/models/{name}", json=manifest, timeout=30
        )
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    def engine_processes(self) -> list[psutil.Process]:
        """Live engine processes serving this stack's model directory."""
        marker = str(self.model_dir)
        found = []
        for proc in psutil.process_iter(["cmdline", "status"]):
            cmdline = proc.info["cmdline"] or []
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if "flexinfer_engine" in cmdline and "serve" in cmdline and marker in cmdline:
                found.append(proc)
        return found

    def all_engine_processes(self) -> list[psutil.Process]:
        """Live engine processes serving any model directory under this stack's data dir."""
        root = str(self.data_dir) + os.sep
        found = []
        for proc in psutil.process_iter(["cmdline", "status"]):
            cmdline = proc.info["cmdline"] or []
            if proc.info["status"] == psutil.STATUS_ZOMBIE or "flexinfer_engine" not in cmdline:
                continue
            if "serve" in cmdline and any(arg.startswith(root) for arg in cmdline):
                found.append(proc)
        return found

    def engine_states(self) -> list[dict[str, Any]]:
        """The local runtime's engine state files (what a restarted controller adopts)."""
        states = []
        for path in sorted((self.data_dir / "controller" / "engines").glob("*.json")):
            try:
                states.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue  # replaced or removed while we read it
        return states

    def engine_log(self, replica: str) -> str:
        """The log of engine ``replica`` under the controller's data dir."""
        path = self.data_dir / "controller" / "logs" / f"{replica}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_engines(self, count: int, timeout: float = 30) -> list[psutil.Process]:
        """Wait until exactly ``count`` engines run; return them."""
        deadline = time.monotonic() + timeout
        while True:
            engines = self.engine_processes()
            if len(engines) == count or time.monotonic() > deadline:
                return engines
            time.sleep(0.1)


def start_process(stack: Stack, name: str, args: list[str], ready: Path) -> None:
    """Run ``flexinfer ARGS`` as the stack's process ``name``; wait until ``ready`` is written."""
    ready.unlink(missing_ok=True)
    env = dict(stack.env)
    if name != "up":
        env["FLEXINFER_READY_FILE"] = str(ready)
    log = (stack.data_dir / f"{name}.log").open("ab")
    proc = subprocess.Popen(
        flexinfer_command(*args), env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL
    )
    log.close()
    stack.procs[name] = proc
    urls = wait_for_file(ready, proc, START_TIMEOUT_S)
    if name == "up":
        stack.urls.update(urls)
    else:
        stack.urls[name] = next(iter(urls.values()))


def stop_stack(stack: Stack) -> None:
    """Stop the stack's processes; kill and report any engine that outlived them."""
    for proc in reversed(list(stack.procs.values())):
        stop_process(proc)
    orphans = stack.all_engine_processes()
    for engine in orphans:
        engine.kill()
    if orphans:
        # An engine that outlives its stack is an orphan: a bug the tests must see.
        pids = ", ".join(str(engine.pid) for engine in orphans)
        raise AssertionError(f"engine pids {pids} outlived their stack")


def delete_redis_keys(url: str, prefix: str) -> None:
    """Delete the streams a distributed stack left in Redis under ``prefix``."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


class StackFactory:
    """Starts stacks of one mode and stops everything they started."""

    def __init__(self, mode: str, root: Path, model_template: Path, exit_stack: ExitStack) -> None:
        self.mode = mode
        self.root = root
        self.model_template = model_template
        self.exit_stack = exit_stack

    def start(self, **env: str) -> Stack:
        """A fresh stack; ``env`` adds FLEXINFER_* settings."""
        data_dir = self.root / f"stack-{uuid.uuid4().hex[:8]}"
        model_dir = data_dir / "models" / "tiny"
        shutil.copytree(self.model_template, model_dir)
        full_env = {**os.environ, "FLEXINFER_LOG_LEVEL": "INFO", **env}
        stack = Stack(self.mode, data_dir, model_dir, full_env)
        if self.mode == "distributed":
            self._distributed_env(stack, env)
        # Last registered, first run: processes stop before their database and streams go.
        self.exit_stack.callback(stop_stack, stack)
        self.launch(stack)
        return stack

    def _distributed_env(self, stack: Stack, overrides: dict[str, str]) -> None:
        redis_url = require_redis()
        prefix = f"e2e-{uuid.uuid4().hex[:8]}:"
        database = self.exit_stack.enter_context(postgres_database("flexinfer_e2e"))
        self.exit_stack.callback(delete_redis_keys, redis_url, prefix)
        shared = {
            "FLEXINFER_BUS_URL": redis_url,
            "FLEXINFER_BUS_STREAM_PREFIX": prefix,
            "FLEXINFER_STORE_URL": database,
            # A test stack must leave nothing behind when it is stopped gracefully.
            "FLEXINFER_CONTROLLER_STOP_ENGINES_ON_SHUTDOWN": "true",
        }
        # What the test passed to start() wins (a Redis of its own, say).
        stack.env.update({k: v for k, v in shared.items() if k not in overrides})

    def launch(self, stack: Stack) -> None:
        """Start (or restart) every process of the stack and wait until it serves."""
        if self.mode == "embedded":
            start_process(
                stack,
                "up",
                ["up", "--data-dir", str(stack.data_dir), "--port", "0", "--no-demo"],
                stack.data_dir / "endpoints.json",
            )
        else:
            self.start_controller(stack)
            start_process(
                stack, "proxy", ["proxy", "--port", "0"], stack.data_dir / "proxy.ready.json"
            )

    def start_controller(self, stack: Stack) -> None:
        """(Re)start the controller; in embedded mode that is the whole stack."""
        if self.mode == "embedded":
            self.launch(stack)
            return
        start_process(
            stack,
            "controller",
            ["controller", "--port", "0", "--data-dir", str(stack.data_dir / "controller")],
            stack.data_dir / "controller.ready.json",
        )

    def controller_process(self, stack: Stack) -> subprocess.Popen[bytes]:
        """The process that runs the controller."""
        return stack.procs["up" if self.mode == "embedded" else "controller"]


@contextmanager
def stack_factory(mode: str, root: Path, model_template: Path) -> Iterator[StackFactory]:
    """A StackFactory whose stacks are all stopped when the block exits."""
    with ExitStack() as exit_stack:
        yield StackFactory(mode, root, model_template, exit_stack)
