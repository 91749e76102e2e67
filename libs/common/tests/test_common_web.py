"""Routing refusals of every FastAPI app answer in OpenAI's error shape."""

from __future__ import annotations

import httpx
from fastapi import APIRouter, FastAPI

from flexinfer_common.web import install_error_handlers


def _app() -> FastAPI:
    router = APIRouter(prefix="/v1")

    @router.post("/things")
    async def make() -> dict[str, str]:
        return {}

    @router.delete("/things")
    async def drop() -> dict[str, str]:
        return {}

    app = FastAPI()
    app.include_router(router)
    install_error_handlers(app)
    return app


async def test_404_and_405_are_openai_errors_naming_the_request() -> None:
    transport = httpx.ASGITransport(app=_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
        missing = await client.get("/v1/nothing")
        wrong = await client.get("/v1/things")
    assert missing.status_code == 404
    assert missing.json() == {
        "error": {
            "message": "Invalid URL (GET /v1/nothing): not found",
            "type": "invalid_request_error",
            "param": None,
            "code": "not_found",
        }
    }
    assert wrong.status_code == 405
    assert wrong.json()["error"]["type"] == "invalid_request_error"
    # Every method of the path, though they come from two routes of an included, prefixed router.
    assert wrong.headers["allow"] == "DELETE, POST"
