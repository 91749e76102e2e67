"""Streaming HTTP downloads shared by the GCS and NGC providers, with error translation."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

import httpx

from flexinfer_common.errors import NotFoundError, PermanentError
from flexinfer_registry.core.providers.base import (
    AccessDeniedError,
    ProviderConfig,
    SourceUnreachableError,
)
from flexinfer_registry.core.providers.files import ProgressMeter, remove_quietly


class Hasher(Protocol):
    """What hashlib, blake3 and our CRC32C wrapper share."""

    def update(self, data: bytes, /) -> object:
        """Feed bytes."""

    def hexdigest(self) -> str:
        """The digest so far, hex."""


def make_client(config: ProviderConfig) -> httpx.AsyncClient:
    """An HTTP client whose every phase times out: a dead source fails, never hangs."""
    timeout = httpx.Timeout(config.timeout_s, connect=min(config.timeout_s, 10.0))
    return httpx.AsyncClient(timeout=timeout, follow_redirects=True)


def check_status(response: httpx.Response, what: str) -> None:
    """Translate an HTTP error status into the provider error tree."""
    status = response.status_code
    if status < 400:
        return
    detail = f"{what}: HTTP {status}"
    if status == 404:
        raise NotFoundError(detail)
    if status in (401, 403):
        raise AccessDeniedError(f"{detail} (check the credentials)")
    if status == 429 or status >= 500:
        raise SourceUnreachableError(detail, delay=5.0)
    raise PermanentError(detail)


@contextmanager
def translate_transport(what: str) -> Iterator[None]:
    """Turn connection errors and timeouts into a readable :class:`SourceUnreachableError`."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise SourceUnreachableError(f"{what}: timed out ({type(exc).__name__})") from exc
    except httpx.TransportError as exc:
        raise SourceUnreachableError(f"{what}: cannot connect ({exc})") from exc


async def get_json(
    client: httpx.AsyncClient,
    url: str,
    what: str,
    *,
    headers: Mapping[str, str] | None = None,
    params: Mapping[str, str] | None = None,
) -> object:
    """GET ``url`` and parse its JSON body, with errors translated."""
    with translate_transport(what):
        response = await client.get(url, headers=headers, params=params)
    check_status(response, what)
    try:
        return response.json()
    except ValueError as exc:
        raise SourceUnreachableError(f"{what}: answer is not JSON") from exc


async def download_to(
    client: httpx.AsyncClient,
    url: str,
    target: Path,
    *,
    what: str,
    meter: ProgressMeter,
    hashers: Mapping[str, Hasher] | None = None,
    headers: Mapping[str, str] | None = None,
    on_headers: Callable[[httpx.Headers], None] | None = None,
) -> int:
    """Stream ``url`` into ``target`` (via ``target.part``), feeding ``hashers``; returns bytes.

    The partial file is removed on any failure, so a half-written file is never left behind
    under its final name.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".part")
    size = 0
    try:
        with translate_transport(what):
            async with client.stream("GET", url, headers=headers) as response:
                check_status(response, what)
                if on_headers is not None:
                    on_headers(response.headers)
                with partial.open("wb") as handle:
                    async for block in response.aiter_bytes():
                        handle.write(block)
                        for hasher in (hashers or {}).values():
                            hasher.update(block)
                        size += len(block)
                        meter.add(len(block))
        partial.replace(target)
    except BaseException:
        remove_quietly(partial)
        raise
    return size


def md5() -> Hasher:
    """A fresh MD5 hasher (S3 single-part ETags), marked as not used for security."""
    return hashlib.md5(usedforsecurity=False)
