"""An ASGI middleware that refuses request bodies over a size limit with 413."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from flexinfer_common.web import openai_error


class _TooLargeError(Exception):
    pass


class BodyLimit:
    """Answers 413 when Content-Length or the streamed body exceeds ``limit`` bytes."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check the declared length, then count what is actually received."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length" and (not value.isdigit() or int(value) > self.limit):
                await self._refuse(scope, receive, send)
                return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooLargeError
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _TooLargeError:
            if not started:
                await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = openai_error(
            413, f"request body exceeds {self.limit} bytes", code="body_too_large"
        )
        await response(scope, receive, send)
