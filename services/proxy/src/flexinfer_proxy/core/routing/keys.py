"""Routing keys: the session key (affinity) and the prompt-prefix key (prefix caching)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from flexinfer_proxy.core.routing.base import RouteContext

AFFINITY_MESSAGES = 5


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _explicit(value: object, limit: int) -> str | None:
    # Explicit keys are clipped, so a hostile client cannot make us hash megabytes.
    if isinstance(value, str) and value:
        return value[:limit]
    return None


def session_key(ctx: RouteContext, explicit_max: int) -> str | None:
    """X-Session-ID > X-Conversation-ID > body session_id > SHA256 of the first 5 messages."""
    for header in (b"x-session-id", b"x-conversation-id"):
        key = _explicit(ctx.header(header), explicit_max)
        if key:
            return key
    body = ctx.body or {}
    key = _explicit(body.get("session_id"), explicit_max)
    if key:
        return key
    messages = body.get("messages")
    if isinstance(messages, list) and messages:
        return _digest(messages[:AFFINITY_MESSAGES])
    return None


def _text(content: object, limit: int) -> str:
    if isinstance(content, str):
        return content[:limit]
    if isinstance(content, list):  # content parts: keep the text ones
        parts = [p.get("text", "") for p in content if isinstance(p, dict)]
        return "".join(p for p in parts if isinstance(p, str))[:limit]
    return ""


def prefix_key(
    ctx: RouteContext, explicit_max: int, system_max: int, document_max: int
) -> str | None:
    """X-Flexinfer-Cache-Key > body cache_key/cacheKey > a canonical hash of the prompt prefix.

    The canonical prefix is the system prompt (clipped to ``system_max`` characters) and
    the first user message (clipped to ``document_max``): requests sharing them share a
    KV-cache prefix on the engine.
    """
    key = _explicit(ctx.header(b"x-flexinfer-cache-key"), explicit_max)
    if key:
        return key
    body = ctx.body or {}
    key = _explicit(body.get("cache_key") or body.get("cacheKey"), explicit_max)
    if key:
        return key
    messages = body.get("messages")
    if isinstance(messages, list) and messages:
        system = [
            _text(m.get("content"), system_max)
            for m in messages
            if isinstance(m, dict) and m.get("role") in ("system", "developer")
        ]
        first = next((m for m in messages if isinstance(m, dict) and m.get("role") == "user"), None)
        document = _text(first.get("content"), document_max) if first else ""
        return _digest(["chat", "\n".join(system)[:system_max], document])
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt:
        prompt = prompt[0]
    if isinstance(prompt, str) and prompt:
        return _digest(["text", prompt[: system_max + document_max]])
    return None
