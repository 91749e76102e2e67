"""The local runtime's HTTP calls to its engines: readiness polls, the POSTs a backend
needs after it is ready, and sleep and wake."""

from __future__ import annotations

import asyncio

import httpx


async def poll_ok(client: httpx.AsyncClient, url: str, interval_s: float) -> None:
    """Return once GET ``url`` answers 200; anything else (refused, 503) is tried again."""
    while True:
        try:
            if (await client.get(url)).status_code == 200:
                return
        except httpx.HTTPError:
            pass  # not listening yet, or busy loading
        await asyncio.sleep(interval_s)  # a production poll timer, not a test wait


async def post(
    client: httpx.AsyncClient,
    url: str,
    body: str | None,
    timeout_s: float,
    params: dict[str, str] | None = None,
) -> str | None:
    """POST a JSON ``body`` (None: no body); None when it answered 200, else what went wrong."""
    headers = {"Content-Type": "application/json"} if body is not None else None
    try:
        response = await client.post(
            url, content=body, params=params, headers=headers, timeout=timeout_s
        )
    except httpx.HTTPError as exc:
        return f"failed: {exc!r}"
    if response.status_code != 200:
        return f"answered {response.status_code}: {response.text[:200]}"
    return None


async def post_once(url: str, timeout_s: float, params: dict[str, str] | None = None) -> str | None:
    """``post`` without a body on a client of its own (sleep and wake are rare)."""
    async with httpx.AsyncClient(trust_env=False) as client:
        return await post(client, url, None, timeout_s, params)
