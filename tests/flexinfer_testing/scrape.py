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


FOREIGN_PREFIXES = ("http_", "python_", "process_", "mx_")
"""Families named by others: the FastAPI instrumentator's, prometheus_client's platform
collectors', and ModelExpress's ``mx_p2p_*``/``mx_artifact_*``, whose names libs/transfer
keeps so that ModelExpress dashboards read our engines (issue 14). The ``flexinfer_``
prefix is ours alone; the other rules hold for all."""
UNIT_SUFFIXES = ("_seconds", "_bytes", "_tokens", "_ratio", "_perc")
"""Base units a histogram or summary may be in (Prometheus: seconds and bytes, never
milliseconds or kilobytes)."""
NON_BASE_UNITS = ("_ms", "_milliseconds", "_microseconds", "_minutes", "_kb", "_mb", "_gb")
UNBOUNDED_LABELS = frozenset({"request_id", "prompt", "trace_id", "span_id", "user", "messages"})
"""Label names whose values are per request: each value would be a series of its own."""


def check_conventions(families: Families) -> None:
    """Every family follows Prometheus's naming rules: a ``flexinfer_`` prefix (ours), base
    units, ``_total`` on counters and only there, and no per-request label."""
    problems: list[str] = []
    for name, family in families.items():
        if not name.startswith(("flexinfer_", *FOREIGN_PREFIXES)):
            problems.append(f"{name}: no flexinfer_ prefix")
        if any(name.endswith(unit) or f"{unit}_" in name for unit in NON_BASE_UNITS):
            problems.append(f"{name}: not in base units")
        if family.type in ("histogram", "summary") and not name.endswith(UNIT_SUFFIXES):
            problems.append(f"{name}: a {family.type} without a unit suffix")
        suffixes = {s.name.removeprefix(name) for s in family.samples}
        if family.type == "counter" and not suffixes <= {"_total", "_created"}:
            problems.append(f"{name}: counter samples {sorted(suffixes)}, not _total")
        if family.type != "counter" and name.endswith("_total"):
            problems.append(f"{name}: a {family.type} named _total")
        labels = {label for sample in family.samples for label in sample.labels}
        if bad := labels & UNBOUNDED_LABELS:
            problems.append(f"{name}: per-request labels {sorted(bad)}")
    assert not problems, "metric naming: " + "; ".join(problems)


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
