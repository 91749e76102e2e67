"""Registry responses mapped onto flexinfer_common.errors, in one place.

401/403 are RegistryAuthError (permanent: the same credentials fail the same way), 404 is
NotFoundError, 408/429/5xx are RegistryUnavailableError whose delay honours Retry-After;
any other status is a RegistryProtocolError. The client never retries by itself: the
caller (the catalog's reconcile loop) requeues a TemporaryError after its delay.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from flexinfer_common.errors import NotFoundError
from flexinfer_controller.catalog.errors import (
    RegistryAuthError,
    RegistryProtocolError,
    RegistryUnavailableError,
)

DEFAULT_DELAY_S = 5.0
MAX_DELAY_S = 3600.0
_TEMPORARY = frozenset({408, 425, 429, 500, 502, 503, 504})


def check_response(response: httpx.Response, registry: str, what: str, body: bytes = b"") -> None:
    """Raise the mapped error unless ``response`` is a 2xx; ``body`` is its (read) body."""
    status = response.status_code
    if 200 <= status < 300:
        return
    detail = f"{what}: HTTP {status}{_error_detail(body)}"
    if status in (401, 403):
        raise RegistryAuthError(registry, detail)
    if status == 404:
        raise NotFoundError(f"registry {registry}: {detail}")
    if status in _TEMPORARY:
        raise RegistryUnavailableError(registry, detail, delay=retry_after(response))
    raise RegistryProtocolError(registry, detail)


def retry_after(response: httpx.Response, now: datetime | None = None) -> float:
    """Seconds to wait from Retry-After (delta-seconds or HTTP-date), else a default."""
    value = response.headers.get("retry-after", "").strip()
    if not value:
        return DEFAULT_DELAY_S
    try:
        seconds = float(int(value))
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return DEFAULT_DELAY_S
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    return min(max(seconds, 0.0), MAX_DELAY_S)


def transport_error(registry: str, what: str, exc: httpx.TransportError) -> Exception:
    """A connect/read failure as a RegistryUnavailableError (the caller raises it from exc)."""
    return RegistryUnavailableError(
        registry, f"{what}: {type(exc).__name__}: {exc}", delay=DEFAULT_DELAY_S
    )


async def read_limited(response: httpx.Response, limit: int, registry: str, what: str) -> bytes:
    """The body of a streamed response, refusing more than ``limit`` bytes."""
    length = response.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise RegistryProtocolError(registry, f"{what}: body of {length} bytes exceeds {limit}")
    chunks: list[bytes] = []
    total = 0
    async for chunk in response.aiter_bytes():
        total += len(chunk)
        if total > limit:
            raise RegistryProtocolError(registry, f"{what}: body exceeds {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def json_body(body: bytes, registry: str, what: str) -> dict[str, Any]:
    """``body`` as a JSON object, or RegistryProtocolError."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RegistryProtocolError(registry, f"{what}: response is not JSON") from exc
    if not isinstance(doc, dict):
        raise RegistryProtocolError(registry, f"{what}: response is not a JSON object")
    return doc


def _error_detail(body: bytes) -> str:
    # The spec's error body: {"errors": [{"code": "...", "message": "..."}]}; shown shortened.
    try:
        doc = json.loads(body) if body else None
    except (ValueError, UnicodeDecodeError):
        return ""
    errors = doc.get("errors") if isinstance(doc, dict) else None
    first = errors[0] if isinstance(errors, list) and errors else None
    if not isinstance(first, dict):
        return ""
    text = f"{first.get('code', '')} {first.get('message', '')}".strip()
    return f" ({text[:200]!r})" if text else ""
