"""How a local engine says it is ready: a line on its ready pipe, or answers to HTTP probes.

Each wait ends in the engine's URL, a ``NotReady`` with the reason the runtime stops it
for, or None when the engine exited first (its exit watcher reports that).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

import httpx

from flexinfer_controller.backends import HttpReadiness
from flexinfer_controller.runtime import procs
from flexinfer_controller.runtime.engine_http import poll_ok, post

EXIT_FIRST_S = 1.0
"""How long a bad ready line waits for the engine's exit: EOF on the pipe usually means it died."""


@dataclass(frozen=True)
class NotReady:
    """The engine will not become ready: stop it, with this reason."""

    reason: str


async def ready_from_pipe(
    ready_fd: int, timeout_s: float, exited: asyncio.Task[int | None]
) -> str | NotReady | None:
    """The URL the engine writes on its ready pipe (a JSON line with ``url``)."""
    try:
        line = await asyncio.wait_for(procs.read_ready_line(ready_fd), timeout_s)
    except TimeoutError:
        return NotReady(f"not ready within {timeout_s:g}s")
    url = parse_ready_line(line)
    if url is not None:
        return url
    await asyncio.wait({exited}, timeout=EXIT_FIRST_S)
    return None if exited.done() else NotReady(f"bad ready line {line[:200]!r}")


async def ready_over_http(
    ready: HttpReadiness, probe_timeout_s: float, poll_s: float
) -> str | NotReady:
    """Ready once GET ready.path answers 200 (within its timeout), then the POSTs do."""
    async with httpx.AsyncClient(timeout=probe_timeout_s, trust_env=False) as client:
        try:
            await asyncio.wait_for(poll_ok(client, ready.url + ready.path, poll_s), ready.timeout_s)
        except TimeoutError:
            return NotReady(f"GET {ready.path} not 200 within {ready.timeout_s:g}s")
        for path, body in ready.then:
            problem = await post(client, ready.url + path, body, ready.then_timeout_s)
            if problem is not None:
                return NotReady(f"POST {path} {problem}")
    return ready.url


def parse_ready_line(line: bytes) -> str | None:
    """The http(s) URL in a ready line, without a trailing slash; None if there is none."""
    try:
        info = json.loads(line)
    except ValueError:
        return None
    url = info.get("url") if isinstance(info, dict) else None
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        return None
    return url.rstrip("/")
