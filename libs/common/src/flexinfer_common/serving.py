"""Run ASGI apps on pre-bound sockets, several per event loop, with one signal handler.

Binding the socket before uvicorn starts is what makes ``--port 0`` work: the port is
known (and can be written to endpoints.json) before anything is served. The embedded
stack runs every service's app in one loop; a distributed service runs just its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import signal
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path

import uvicorn
from starlette.types import ASGIApp

from flexinfer_common.lifespan import AppLifespan

log = logging.getLogger(__name__)


class _Server(uvicorn.Server):
    """A uvicorn server that leaves signal handling and the lifespan to its ServerGroup."""

    def __init__(self, config: uvicorn.Config, lifespan: AppLifespan) -> None:
        super().__init__(config)
        self.app_lifespan = lifespan

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        # Requests see what the lifespan (run by the group) put in its state, as under uvicorn.
        self.lifespan.state.update(self.app_lifespan.state)
        await super().startup(sockets=sockets)


def freeze_startup_heap() -> None:
    """Collect once, then move every live object out of the collector's reach (gc.freeze).

    What a service builds before it serves (modules, the app, pydantic and prometheus
    objects, an informer's first list) lives for the whole process. A full collection that
    walks it took tens of ms (30-70 ms of CPU in the scheduler, more under load), which
    showed as p99 latency whenever one ran; frozen, collections walk only newer objects.
    """
    gc.collect()
    gc.freeze()


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (port 0 picks a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock.listen(2048)
    sock.set_inheritable(False)
    return sock


def socket_url(sock: socket.socket, scheme: str = "http") -> str:
    """``scheme://host:port`` of a bound socket."""
    host, port = sock.getsockname()[:2]
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"


READY_FILE_ENV = "FLEXINFER_READY_FILE"


def _ready_file_from_env() -> Path | None:
    # Popped, not read: the file is this process's, and children (engines) must not inherit it.
    value = os.environ.pop(READY_FILE_ENV, None)
    return Path(value) if value else None


def write_json_atomic(path: Path, data: object) -> None:
    """Write JSON so that readers see either the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)


@dataclass
class ServerGroup:
    """Several ASGI apps that start and stop together.

    Once every app has started, the group writes ``{name: url}`` to ``ready_file``
    (default: the path in $FLEXINFER_READY_FILE), so a supervisor or a test that started a
    service with ``--port 0`` learns where it listens.
    """

    log_level: str = "warning"
    ready_file: Path | None = field(default_factory=_ready_file_from_env)
    _servers: list[tuple[str, _Server, socket.socket]] = field(default_factory=list)
    _stopping: asyncio.Event = field(default_factory=asyncio.Event)

    def add_app(
        self,
        name: str,
        app: ASGIApp,
        sock: socket.socket,
        *,
        http: type[asyncio.Protocol] | None = None,
        keepalive_s: float = 5.0,
    ) -> str:
        """Serve ``app`` on ``sock`` once ``run`` starts; returns its URL.

        ``http`` replaces uvicorn's HTTP protocol (the proxy brings its own); uvicorn still
        owns the socket, the lifespan and shutdown. ``keepalive_s`` closes idle connections.
        """
        config = uvicorn.Config(
            app,
            log_level=self.log_level,
            access_log=False,
            lifespan="off",  # the group runs it (AppLifespan): startup errors are raised
            timeout_graceful_shutdown=10,
            timeout_keep_alive=int(keepalive_s) if keepalive_s >= 1 else 1,
            ws="none",
            http=http or "auto",
        )
        if keepalive_s < 1:
            # uvicorn's setting is typed int but used as seconds; tests want shorter.
            config.timeout_keep_alive = keepalive_s  # type: ignore[assignment]
        self._servers.append((name, _Server(config, AppLifespan(name, app)), sock))
        return socket_url(sock)

    def urls(self) -> dict[str, str]:
        """The URL of every app, by name."""
        return {name: socket_url(sock) for name, _, sock in self._servers}

    def stop(self) -> None:
        """Ask every server to finish its requests and exit."""
        self._stopping.set()
        for _, server, _ in self._servers:
            server.should_exit = True

    def install_signal_handlers(self) -> None:
        """Stop on SIGINT/SIGTERM (a second SIGINT forces exit)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._on_signal)

    def _on_signal(self) -> None:
        if self._stopping.is_set():
            for _, server, _ in self._servers:
                server.force_exit = True
        log.info("shutting down")
        self.stop()

    async def run(self, on_ready: Callable[[], Awaitable[None]] | None = None) -> None:
        """Serve until ``stop``; ``on_ready`` runs once every app has started.

        Every app's lifespan starts before any server accepts; a startup that fails is
        raised here (after the apps that did start are shut down again).
        """
        lifespans = [server.app_lifespan for _, server, _ in self._servers]
        try:
            await _start_all(lifespans)
            await self._serve(on_ready)
        finally:
            for sock in (s for _, _, s in self._servers):
                sock.close()
            for lifespan in reversed(lifespans):
                await lifespan.shutdown()
        for name, server, _ in self._servers:
            if not server.started:
                raise RuntimeError(f"{name} failed to start (see the log above)")

    async def _serve(self, on_ready: Callable[[], Awaitable[None]] | None) -> None:
        tasks = [
            asyncio.create_task(server.serve(sockets=[sock]), name=f"serve-{name}")
            for name, server, sock in self._servers
        ]
        try:
            await self._wait_started(tasks)
            if on_ready is not None:
                await on_ready()
            if self.ready_file is not None:
                write_json_atomic(self.ready_file, self.urls())
            stop_task = asyncio.create_task(self._stopping.wait())
            done, _ = await asyncio.wait([*tasks, stop_task], return_when=asyncio.FIRST_COMPLETED)
            if stop_task not in done:
                # A server exited by itself (startup failure): bring the others down too.
                self.stop()
            stop_task.cancel()
        finally:
            self.stop()
            results = await asyncio.gather(*tasks, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                raise result

    async def _wait_started(self, tasks: list[asyncio.Task[None]]) -> None:
        while not all(server.started for _, server, _ in self._servers):
            if any(task.done() for task in tasks):
                raise RuntimeError("a server failed to start (see the log above)")
            await asyncio.sleep(0.01)


async def _start_all(lifespans: list[AppLifespan]) -> None:
    """Start every lifespan at once; raise the first failure (the caller shuts all down)."""
    results = await asyncio.gather(*(x.startup() for x in lifespans), return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        raise errors[0]


@contextlib.asynccontextmanager
async def serve_in_background(
    app: ASGIApp,
    host: str = "127.0.0.1",
    *,
    http: type[asyncio.Protocol] | None = None,
    keepalive_s: float = 5.0,
) -> AsyncIterator[str]:
    """Serve ``app`` (lifespan included) on a free port for the block; yields its URL."""
    group = ServerGroup(log_level="error", ready_file=None)
    url = group.add_app("app", app, bind_socket(host, 0), http=http, keepalive_s=keepalive_s)
    started = asyncio.Event()

    async def on_ready() -> None:
        started.set()

    task = asyncio.create_task(group.run(on_ready=on_ready))
    waiter = asyncio.create_task(started.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    if not started.is_set():
        waiter.cancel()
        await task  # raises the startup error
    try:
        yield url
    finally:
        group.stop()
        await task
