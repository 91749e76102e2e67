"""Reading a service's /metrics with prometheus_client's own text parser.

One helper for every service's metrics test: families by name, and the checks that a
family exists with the label names the docs promise and a sample with given label values.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import httpx
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

Families = dict[str, Metric]


def parse_metrics(text: str) -> Families:
    """The families of a text exposition, by family name (counters without ``_total``)."""
    return {family.name: family for family in text_string_to_metric_families(text)}


async def scrape(client: httpx.AsyncClient, path: str = "/metrics") -> Families:
    """GET ``path`` on ``client``'s service and parse it (a non-200 fails the test)."""
    response = await client.get(path)
    assert response.status_code == 200, response.text
    return parse_metrics(response.text)


def check_families(families: Families, expected: Mapping[str, set[str]]) -> None:
    """Each expected family exists and some sample of it has exactly those label names
    (histogram buckets' ``le`` aside)."""
    missing = sorted(set(expected) - set(families))
    assert not missing, f"families missing: {missing}"
    for name, labels in expected.items():
        seen = [set(s.labels) - {"le"} for s in families[name].samples]
        assert labels in seen or (not labels and not seen), (
            f"{name}: no sample with labels {sorted(labels)} (seen {seen[:3]})"
        )


def sample_value(families: Families, sample: str, **labels: str) -> float | None:
    """The value of sample ``sample`` (``x_total``, ``x_bucket``...) whose labels include
    ``labels``; None when there is none."""
    family = families.get(_family_name(families, sample))
    if family is None:
        return None
    for s in family.samples:
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
            return float(s.value)
    return None


def _family_name(families: Families, sample: str) -> str:
    for suffix in ("_total", "_bucket", "_count", "_sum", "_created"):
        if sample.endswith(suffix) and sample.removesuffix(suffix) in families:
            return sample.removesuffix(suffix)
    return sample


async def wait_for_sample(
    client: httpx.AsyncClient, sample: str, value: float, timeout_s: float = 10.0, **labels: str
) -> Families:
    """Scrape until ``sample`` with ``labels`` reaches ``value``; AssertionError at the
    deadline. Returns the last scrape."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        families = await scrape(client)
        if (sample_value(families, sample, **labels) or 0.0) >= value:
            return families
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{sample}{labels} never reached {value}")
        await asyncio.sleep(0.02)  # a poll interval: the condition is the scraped value
