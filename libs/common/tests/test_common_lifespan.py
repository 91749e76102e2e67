"""ServerGroup runs each app's lifespan itself: a failed startup is raised, not logged."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from fastapi import FastAPI, Request

from flexinfer_common.errors import StoreError
from flexinfer_common.serving import ServerGroup, bind_socket, serve_in_background


def _app(events: list[str], *, fail: BaseException | None = None) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, str]]:
        events.append("startup")
        if fail is not None:
            raise fail
        yield {"greeting": "hello"}
        events.append("shutdown")

    app = FastAPI(lifespan=lifespan)

    @app.get("/state")
    async def state(request: Request) -> dict[str, str]:
        return {"greeting": request.state.greeting}

    return app


async def test_a_failed_startup_is_raised_as_itself_and_nothing_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    ok: list[str] = []
    group = ServerGroup(ready_file=None)
    group.add_app("healthy", _app(ok), bind_socket("127.0.0.1", 0))
    group.add_app("broken", _app([], fail=StoreError("store unavailable: no such database")),
                  bind_socket("127.0.0.1", 0))  # fmt: skip
    with pytest.raises(StoreError, match="no such database"):
        await group.run()
    # The app that did start was shut down again; no server ever accepted.
    assert ok == ["startup", "shutdown"]
    assert not any("Traceback" in r.getMessage() for r in caplog.records)
    assert not any(r.name.startswith("uvicorn") and r.levelno >= logging.ERROR
                   for r in caplog.records)  # fmt: skip


async def test_requests_see_the_lifespan_state_and_shutdown_runs_after_serving() -> None:
    events: list[str] = []
    async with serve_in_background(_app(events)) as url, httpx.AsyncClient() as client:
        response = await client.get(f"{url}/state")
        assert response.json() == {"greeting": "hello"}
        assert events == ["startup"]
    assert events == ["startup", "shutdown"]


async def test_an_app_without_a_lifespan_is_served() -> None:
    async def plain(scope: dict[str, object], receive: object, send: object) -> None:
        if scope["type"] == "lifespan":
            return  # does not speak the protocol: returns at once
        assert callable(send)
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async with serve_in_background(plain) as url, httpx.AsyncClient() as client:  # type: ignore[arg-type]
        assert (await client.get(url)).status_code == 204
