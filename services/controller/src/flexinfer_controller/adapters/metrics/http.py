"""``core.kvcache.EngineMetrics`` and ``core.sharing.drain.InFlight`` over HTTP, parsed
by prometheus_client's own parser."""

from __future__ import annotations

import logging

import httpx
from prometheus_client.parser import text_string_to_metric_families

from flexinfer_controller.core.kvcache import USAGE_METRICS
from flexinfer_controller.core.sharing.drain import IN_FLIGHT_METRICS

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
        text = await self._page(url)
        return usage_from_text(text) if text is not None else None

    async def requests_in_flight(self, url: str) -> int | None:
        """The requests the engine runs or queues, None without a reading."""
        text = await self._page(url)
        return in_flight_from_text(text) if text is not None else None

    async def _page(self, url: str) -> str | None:
        """The metrics page's text; None when it cannot be read now."""
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
        return body.decode("utf-8", "replace")

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


def in_flight_from_text(text: str) -> int | None:
    """The requests running or queued in an engine (the sum of its in-flight gauges, over
    their label sets), None when the page has none of them."""
    total: float | None = None
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in IN_FLIGHT_METRICS and sample.value >= 0:
                    total = (total or 0.0) + sample.value
    except ValueError:  # not Prometheus text: no reading
        return None
    return None if total is None else round(total)
