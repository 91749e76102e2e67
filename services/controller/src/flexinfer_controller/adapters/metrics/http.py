"""``core.kvcache.EngineMetrics`` over HTTP, parsed by prometheus_client's own parser."""

from __future__ import annotations

import logging

import httpx
from prometheus_client.parser import text_string_to_metric_families

from flexinfer_controller.core.kvcache import USAGE_METRICS

log = logging.getLogger(__name__)

MAX_BODY = 4 * 1024 * 1024
"""A metrics page larger than this is not an engine's: it is not read to the end."""


class HttpEngineMetrics:
    """GETs an engine's metrics page with a short timeout; any failure reads as None."""

    def __init__(self, timeout_s: float = 2.0) -> None:
        # Short: the check runs inside a reconcile, and a stuck engine must not hold it.
        self._client = httpx.AsyncClient(timeout=timeout_s, follow_redirects=False)

    async def kv_cache_usage(self, url: str) -> float | None:
        """The largest KV-cache usage sample on the page, None without one."""
        try:
            async with self._client.stream("GET", url) as response:
                if response.status_code != 200:
                    return None
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_BODY:
                        return None
        except httpx.HTTPError as exc:
            log.debug("cannot read %s: %s", url, exc)
            return None
        return usage_from_text(body.decode("utf-8", "replace"))

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()


def usage_from_text(text: str) -> float | None:
    """The largest KV-cache usage sample (0-1) in Prometheus text, None without one."""
    values: list[float] = []
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in USAGE_METRICS and 0.0 <= sample.value <= 1.0:
                    values.append(sample.value)
    except ValueError:  # not Prometheus text: no reading
        return None
    return max(values) if values else None
