"""Every PromQL expression of every Grafana dashboard works against real data.

A real Prometheus (Debian's ``prometheus`` package; ``./dev setup`` installs it) scrapes
compose.yaml's topology, run as processes (flexinfer_testing.dashboard_stack), after real
traffic through the proxy: a cold start, streamed and plain answers, an unknown model, GPU
swap between two shared Models and a burst past the rate limit. Then each panel's
expressions, and each template variable's ``label_values``, are evaluated through
Prometheus's HTTP API: each must parse and return at least one series.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from flexinfer_testing.compose_processes import ComposeProcesses
from flexinfer_testing.dashboard_stack import BURST, dashboard_stack, drive_traffic
from flexinfer_testing.dashboards import (
    all_queries,
    load_dashboards,
    query_variables,
    wait_for_series,
)
from flexinfer_testing.prometheus import Prometheus, prometheus_binary

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]
RATE_INTERVAL = "1m"
"""``$__rate_interval``: Grafana's is at least four scrape intervals; a minute holds every
sample of the traffic below."""
DATA_TIMEOUT_S = 30.0
"""Scrapes are a second apart: every series is there a few seconds after the traffic."""


@pytest.fixture
def scraped(tmp_path: Path) -> Iterator[tuple[ComposeProcesses, Prometheus]]:
    """The stack, after the traffic, with Prometheus scraping it."""
    binary = prometheus_binary()
    if binary is None:
        reason = "no prometheus binary on PATH: `./dev setup` installs Debian's package"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason} (CI=true: tests must not be skipped)")
        pytest.skip(reason)
    with dashboard_stack(tmp_path, binary) as (procs, prom):
        yield procs, prom


async def test_every_dashboard_expression_returns_series_after_real_traffic(
    scraped: tuple[ComposeProcesses, Prometheus],
) -> None:
    procs, prom = scraped
    seen = await drive_traffic(procs)
    assert seen["prefetch"], seen  # a cache entry the registry downloaded, then evicted
    assert seen["cold"], seen
    assert seen["stream"], seen
    assert all(seen["swaps"]), seen
    assert seen["unknown"] == 404, seen
    assert len(seen["burst"]) == BURST
    assert {200, 429} <= set(seen["burst"]), seen["burst"]  # the per-model rate limit

    queries = all_queries()
    assert len(queries) > 40, len(queries)
    failures = wait_for_series(prom, queries, RATE_INTERVAL, DATA_TIMEOUT_S)
    assert not failures, "\n".join([*failures, f"targets: {prom.targets_up()}"])
    # The template variables' label_values (Grafana's own query), from the same data.
    for board in load_dashboards().values():
        for name, (metric, label) in query_variables(board).items():
            assert prom.label_values(label, metric), f"${name}: label_values({metric}, {label})"
    models = set(prom.label_values("model", "flexinfer_proxy_requests_total"))
    assert models >= {"default/shared-a", "default/shared-b"}, models
