"""One task per client connection, which serves the connection's requests in turn.

A task per request was the largest single cost of the server's own part of a request:
its creation, Python 3.11's registry of every task in a Python-level ``WeakSet``, and
two done callbacks on every request (bench/RESULTS.md, the proxy's entry of 2026-12-04,
21:02). HTTP/1.1 answers a connection's requests one at a time, so one task suffices.

The worker counts in the server's ``tasks`` only while it serves a request, for the
concurrency limit and graceful shutdown (uvicorn waits for those tasks, and cancels them
past its timeout). It ends with its connection, or with a request that failed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from flexinfer_common.http1.exchange import Exchange, error_bytes

log = logging.getLogger(__name__)

Serve = Callable[[Exchange], Coroutine[Any, Any, None]]
"""The work of serving one request: the pipeline's, or the ASGI app's."""


class ConnectionWorker:
    """Serves the requests handed to it, in order, in one task started on the first."""

    __slots__ = ("_closed", "_loop", "_ready", "_task", "_tasks", "_wakeup")

    def __init__(self, loop: asyncio.AbstractEventLoop, tasks: set[asyncio.Task[None]]) -> None:
        self._loop = loop
        self._tasks = tasks
        """The server's running request tasks (uvicorn's ``ServerState.tasks``)."""
        self._task: asyncio.Task[None] | None = None
        self._ready: tuple[Exchange, Serve] | None = None
        """The request handed over and not yet taken."""
        self._wakeup: asyncio.Future[None] | None = None
        """Resolved when the idle worker has a request, or the connection closed."""
        self._closed = False

    def hand(self, exchange: Exchange, serve: Serve) -> None:
        """Serve ``exchange`` with ``serve`` once the request before it has returned."""
        self._ready = (exchange, serve)
        task = self._task
        if task is None or task.done():
            self._task = self._loop.create_task(self._work())
        else:
            self._wake()

    def connection_lost(self) -> None:
        """The connection closed: an idle worker ends (a busy one once its request does)."""
        self._closed = True
        self._wake()

    def _wake(self) -> None:
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)

    async def _work(self) -> None:
        task = asyncio.current_task()
        assert task is not None
        while (ready := await self._next()) is not None:
            exchange, serve = ready
            if exchange.disconnected:
                continue  # the client left before its turn: nothing of it runs
            exchange.task = task
            self._tasks.add(task)
            try:
                await serve(exchange)
            except asyncio.CancelledError:
                if not exchange.response_complete and not exchange.disconnected:
                    exchange.conn.close()  # shutdown or a refused body: nothing follows
                raise
            except Exception as exc:  # a bug: the client still gets an answer
                log.error("exception in the ASGI app", exc_info=exc)
                _fail(exchange)
                return
            finally:
                exchange.task = None
                self._tasks.discard(task)
            if not (exchange.disconnected or exchange.response_complete):
                log.error("the app returned without completing its response")
                _fail(exchange)
                return

    async def _next(self) -> tuple[Exchange, Serve] | None:
        """The next request to serve; None once the connection is closed."""
        while self._ready is None:
            if self._closed:
                return None
            self._wakeup = self._loop.create_future()
            try:
                await self._wakeup
            finally:
                self._wakeup = None
        ready, self._ready = self._ready, None
        return ready


def _fail(exchange: Exchange) -> None:
    """A request ended with no complete answer: a 500 if none began, and the connection
    closes, so a client never waits on an answer nobody writes."""
    if not exchange.started and not exchange.disconnected:
        exchange.conn.write(error_bytes(500, "internal server error", close=True))
    exchange.conn.close()
