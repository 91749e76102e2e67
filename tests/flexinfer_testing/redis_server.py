"""A redis-server of a test's own, on its own loopback port, that the test may kill and restart.

It keeps nothing on disk (``--save '' --appendonly no``): a restart loses every stream and
consumer group, the harshest outage a client of Redis has to survive.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from flexinfer_testing.ports import free_port
from flexinfer_testing.services import unavailable

START_TIMEOUT_S = 15.0


class RedisServer:
    """One redis-server process on 127.0.0.1:``port``; ``restart`` keeps the port."""

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        self.workdir = workdir
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def url(self, db: int = 0) -> str:
        """The redis:// URL of database ``db``."""
        return f"redis://127.0.0.1:{self.port}/{db}"

    @property
    def pid(self) -> int:
        """The running server's pid."""
        assert self.proc is not None, "the server is not running"
        return self.proc.pid

    def start(self) -> None:
        """Start the server and wait until it answers PING."""
        binary = shutil.which("redis-server")
        if binary is None:
            unavailable("redis-server", FileNotFoundError("redis-server is not on PATH"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = (self.workdir / "redis.log").open("ab")
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.workdir)],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        log.close()
        self.starts += 1
        self._wait_answering(self.proc)

    def _wait_answering(self, proc: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.5)
        try:
            while True:
                if proc.poll() is not None:
                    tail = (self.workdir / "redis.log").read_text(errors="replace")[-500:]
                    raise RuntimeError(f"redis-server exited with {proc.returncode}: {tail}")
                try:
                    if client.ping():
                        return
                except redis.RedisError:
                    if time.monotonic() > deadline:
                        raise
                time.sleep(0.02)
        finally:
            client.close()

    def stop(self, sig: int = signal.SIGKILL) -> None:
        """Stop the server (SIGKILL by default: a crash, nothing flushed) and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(10)
        self.proc = None

    def restart(self, sig: int = signal.SIGKILL) -> None:
        """Stop, then start again on the same port: every key is gone afterwards."""
        self.stop(sig)
        self.start()


@contextmanager
def redis_server(workdir: Path) -> Iterator[RedisServer]:
    """A started RedisServer, stopped when the block exits."""
    server = RedisServer(workdir)
    server.start()
    try:
        yield server
    finally:
        server.stop()
