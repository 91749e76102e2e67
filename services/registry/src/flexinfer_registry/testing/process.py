"""A registry in a process of its own (``python -m flexinfer_registry``), for tests that
kill it, starve it of disk, or measure its memory.

:func:`registry_process` starts one with the given ``FLEXINFER_REGISTRY_*`` environment,
waits for its ready file (HTTP) and its gRPC health, and stops it afterwards (SIGTERM, then
SIGKILL). The gRPC port is picked free beforehand, as the process reports only its HTTP URL.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


@dataclass
class RegistryProcess:
    """A running registry process."""

    proc: subprocess.Popen[bytes]
    http_url: str
    grpc_address: str
    log: Path

    def rss_kib(self) -> int:
        """The process's resident set size (VmRSS), KiB."""
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        line = next(x for x in status.splitlines() if x.startswith("VmRSS:"))
        return int(line.split()[1])

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, as when a node or the OOM killer takes it."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        """SIGTERM and wait, SIGKILL after 30 s."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


def free_port() -> int:
    """A port free on loopback now (the registry binds it a moment later)."""
    with socket.create_server(("127.0.0.1", 0)) as sock:
        return int(sock.getsockname()[1])


def _wait(what: str, ready: Callable[[], bool], proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while not ready():
        if proc.poll() is not None:
            raise RuntimeError(f"registry exited ({proc.returncode}): {log.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"registry not {what} after 60 s: {log.read_text()[-2000:]}")
        time.sleep(0.05)  # polling the condition above, with a deadline


def _serving(address: str) -> bool:
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
        except grpc.RpcError:
            return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


@contextmanager
def registry_process(
    workdir: Path,
    env: Mapping[str, str],
    *,
    preexec_fn: Callable[[], None] | None = None,
) -> Iterator[RegistryProcess]:
    """Start a registry with ``env`` on top of this process's environment; see the module
    docstring. ``preexec_fn`` runs in the child before exec (resource limits)."""
    workdir.mkdir(parents=True, exist_ok=True)
    ready_file = workdir / f"ready-{time.monotonic_ns()}.json"
    log = workdir / f"registry-{time.monotonic_ns()}.log"
    grpc_port = free_port()
    full_env = {
        **os.environ,
        "FLEXINFER_REGISTRY_HOST": "127.0.0.1",
        "FLEXINFER_REGISTRY_PORT": "0",
        "FLEXINFER_REGISTRY_GRPC_HOST": "127.0.0.1",
        "FLEXINFER_REGISTRY_GRPC_PORT": str(grpc_port),
        "FLEXINFER_READY_FILE": str(ready_file),
        **env,
    }
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "flexinfer_registry"],
            env=full_env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            preexec_fn=preexec_fn,  # only resource limits and signal dispositions
        )
    registry = RegistryProcess(proc, "", f"127.0.0.1:{grpc_port}", log)
    try:
        _wait("ready", ready_file.exists, proc, log)
        urls = json.loads(ready_file.read_text())
        registry.http_url = str(next(iter(urls.values())))
        _wait("serving gRPC", lambda: _serving(registry.grpc_address), proc, log)
        yield registry
    finally:
        registry.stop()
