"""``core.lora.engine.AdapterEngine`` over HTTP: vLLM's ``/v1/load_lora_adapter``,
``/v1/unload_lora_adapter`` and the adapter cards of ``/v1/models``.

vLLM answers a load with 200 and a line of text, a refusal with 400 (bad input, already
loaded, the engine's own load error) or 404 (no adapter at the path; an unload of an
adapter it does not hold), in its ErrorResponse: ``{"message", "type", "code"}`` in older
releases, ``{"error": {...}}`` in newer ones. Every 4xx becomes EngineRefusedError with
the engine's message; a connection failure, a timeout or a 5xx EngineUnavailableError.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx

from flexinfer_controller.backends import AdapterEndpoints
from flexinfer_controller.core.lora.engine import EngineRefusedError, EngineUnavailableError

log = logging.getLogger(__name__)

MAX_BODY = 4 * 1024 * 1024
"""A listing larger than this is not an engine's: it is not read to the end."""
MAX_MESSAGE = 2000
"""An engine's error message is cut here before it goes into a status."""


class HttpAdapterEngine:
    """One connection pool for every engine; short timeouts for listings, long for loads."""

    def __init__(self, list_timeout_s: float = 5.0, load_timeout_s: float = 120.0) -> None:
        # Loads read the adapter's weights (and may compile kernels): minutes, not seconds.
        self._client = httpx.AsyncClient(follow_redirects=False, trust_env=False)
        self._list_timeout_s = list_timeout_s
        self._load_timeout_s = load_timeout_s

    async def listed(self, url: str, api: AdapterEndpoints) -> dict[str, str | None]:
        """The cards of ``api.listing`` whose ``parent`` is set: name -> ``root``."""
        target = _join(url, api.listing)
        try:
            async with self._client.stream("GET", target, timeout=self._list_timeout_s) as reply:
                body = await _read(reply, target)
        except httpx.HTTPError as exc:
            raise EngineUnavailableError(f"GET {target}: {_describe(exc)}") from exc
        _check(reply.status_code, body, f"GET {target}")
        return adapter_cards(body, target)

    async def load(self, url: str, api: AdapterEndpoints, name: str, path: str) -> None:
        """POST ``{"lora_name", "lora_path"}`` to the load route."""
        await self._post(_join(url, api.load), {"lora_name": name, "lora_path": path})

    async def unload(self, url: str, api: AdapterEndpoints, name: str) -> None:
        """POST ``{"lora_name"}`` to the unload route; a 404 (not held) is success."""
        try:
            await self._post(_join(url, api.unload), {"lora_name": name})
        except EngineRefusedError as exc:
            if exc.status != 404:
                raise

    async def _post(self, target: str, body: dict[str, str]) -> None:
        try:
            reply = await self._client.post(target, json=body, timeout=self._load_timeout_s)
        except httpx.HTTPError as exc:
            raise EngineUnavailableError(f"POST {target}: {_describe(exc)}") from exc
        _check(reply.status_code, reply.content, f"POST {target}")

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()


def _join(url: str, path: str) -> str:
    return url.rstrip("/") + path


def _describe(exc: httpx.HTTPError) -> str:
    return str(exc) or type(exc).__name__


async def _read(reply: httpx.Response, target: str) -> bytes:
    body = bytearray()
    async for chunk in reply.aiter_bytes():
        body += chunk
        if len(body) > MAX_BODY:
            raise EngineUnavailableError(f"GET {target}: the answer exceeds {MAX_BODY} bytes")
    return bytes(body)


def _check(status: int, body: bytes, what: str) -> None:
    """Nothing for a 2xx; the engine's refusal (4xx) or unavailability (anything else)."""
    if 200 <= status < 300:
        return
    message = f"{what} answered {status}: {error_message(body)}"
    if 400 <= status < 500:
        raise EngineRefusedError(message, status=status)
    raise EngineUnavailableError(message)


def error_message(body: bytes) -> str:
    """The message of vLLM's ErrorResponse (old flat or new nested), FastAPI's ``detail``,
    or the text itself; printable characters only, cut to MAX_MESSAGE."""
    text = body.decode("utf-8", "replace")
    try:
        parsed: Any = json.loads(text)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        nested = parsed.get("error")
        found = nested.get("message") if isinstance(nested, dict) else None
        found = found or parsed.get("message") or parsed.get("detail")
        if found is not None:
            text = found if isinstance(found, str) else json.dumps(found)
    clean = "".join(c if c.isprintable() else " " for c in text).strip()
    return clean[:MAX_MESSAGE] or "(no message)"


def adapter_cards(body: bytes, target: str) -> dict[str, str | None]:
    """Adapter cards of an OpenAI model list: those with a ``parent`` (the base model)."""
    try:
        data = json.loads(body).get("data")
    except (ValueError, AttributeError):
        data = None
    if not isinstance(data, list):
        raise EngineUnavailableError(f"GET {target}: not an OpenAI model list")
    out: dict[str, str | None] = {}
    for card in data:
        if not isinstance(card, dict) or not card.get("parent"):
            continue
        name, root = card.get("id"), card.get("root")
        if isinstance(name, str) and name:
            out[name] = root if isinstance(root, str) else None
    return out
