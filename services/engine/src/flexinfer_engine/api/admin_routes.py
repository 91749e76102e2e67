"""Sleep/wake (vLLM-compatible) and /engine/info."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Query

from flexinfer_engine.core.runner import AsyncRunner, State


def admin_router(runner: AsyncRunner, info: Callable[[], dict[str, Any]]) -> APIRouter:
    """POST /sleep, POST /wake_up, GET /is_sleeping, GET /engine/info."""
    router = APIRouter()

    @router.post("/sleep")
    async def sleep(level: int = Query(default=1, ge=1, le=2)) -> dict[str, Any]:
        await runner.sleep(level)
        return {"is_sleeping": True, "level": runner.engine.sleep_level}

    @router.post("/wake_up")
    async def wake_up() -> dict[str, bool]:
        await runner.wake()
        return {"is_sleeping": False}

    @router.get("/is_sleeping")
    async def is_sleeping() -> dict[str, bool]:
        return {"is_sleeping": runner.state is State.SLEEPING}

    @router.get("/engine/info")
    async def engine_info() -> dict[str, Any]:
        return info()

    return router
