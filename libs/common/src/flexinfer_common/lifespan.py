"""Drive an ASGI app's lifespan ourselves, so a failed startup is an exception, not a log.

uvicorn runs the lifespan itself and, when startup fails, logs the app's traceback and
exits: a user who set a wrong URL reads fifty lines of stack for one line of reason. A
:class:`ServerGroup` instead starts each app's lifespan with :class:`AppLifespan` before
its server accepts connections (uvicorn then runs with ``lifespan="off"``). The startup
error is raised to the service's ``main``, which prints it as one line.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from starlette.types import ASGIApp, Message

log = logging.getLogger(__name__)


class LifespanError(RuntimeError):
    """The app reported a failed startup or shutdown without raising an exception."""


class AppLifespan:
    """One app's lifespan: ``startup()`` before serving, ``shutdown()`` after."""

    def __init__(self, name: str, app: ASGIApp) -> None:
        self.name = name
        self._app = app
        self._to_app: asyncio.Queue[Message] = asyncio.Queue()
        self._from_app: asyncio.Queue[Message] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.state: dict[str, Any] = {}
        """What the lifespan stored in ``scope["state"]``: each request gets a copy."""

    async def startup(self) -> None:
        """Run the app's startup; raises what it raised (or LifespanError)."""
        scope = {
            "type": "lifespan",
            "asgi": {"version": "3.0", "spec_version": "2.0"},
            "state": self.state,
        }
        self._task = asyncio.create_task(self._run(scope), name=f"lifespan-{self.name}")
        await self._to_app.put({"type": "lifespan.startup"})
        await self._answer("startup")

    async def _run(self, scope: dict[str, Any]) -> None:
        await self._app(scope, self._to_app.get, self._from_app.put)

    async def shutdown(self) -> None:
        """Run the app's shutdown; a failure is logged, as shutdown must go on."""
        if self._task is None or self._task.done():
            return
        await self._to_app.put({"type": "lifespan.shutdown"})
        try:
            await self._answer("shutdown")
        except Exception as exc:  # one app's cleanup failing must not stop the others'
            log.error("%s: shutdown failed: %s", self.name, exc)
        await asyncio.wait({self._task}, timeout=_EXIT_WAIT_S)

    async def _answer(self, phase: str) -> None:
        """Wait for the app's reply to ``phase``; raise its exception if it failed."""
        assert self._task is not None
        reply = asyncio.create_task(self._from_app.get())
        await asyncio.wait({reply, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if not reply.done():
            # The app returned (or raised) without a reply: one that does not speak the
            # lifespan protocol returns at once, and serves without one.
            reply.cancel()
            self._task.result()
            return
        if reply.result()["type"] != f"lifespan.{phase}.failed":
            return
        # Starlette sends "failed" with the traceback as text, then raises: the exception
        # says the same in one line.
        await asyncio.wait({self._task}, timeout=_EXIT_WAIT_S)
        error = self._task.exception() if self._task.done() and not self._task.cancelled() else None
        if error is not None:
            raise error
        raise LifespanError(f"{self.name}: {phase} failed")


_EXIT_WAIT_S = 5.0
"""How long an app may take to return after it answered the last lifespan message."""
