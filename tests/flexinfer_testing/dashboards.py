"""The Grafana dashboards of deploy/grafana/dashboards, read as PromQL to evaluate.

Grafana expands template variables before it sends a query; this does the same with the
values a person picking "All" gets (``$model`` and the other query variables: ``.*``) and
a rate window long enough for one-second scrapes.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flexinfer_testing.prometheus import Prometheus, QueryError
from flexinfer_testing.repo import repo_root

DASHBOARDS = repo_root() / "deploy" / "grafana" / "dashboards"
DATASOURCE_UID = "prometheus"
"""The uid deploy/grafana/provisioning/datasources/prometheus.yaml gives Prometheus."""
LABEL_VALUES = re.compile(r"^label_values\((?P<metric>[^,()]+),\s*(?P<label>\w+)\)$")
VARIABLE = re.compile(r"\$(\w+)|\$\{(\w+)\}|\[\[(\w+)\]\]")


@dataclass(frozen=True)
class PanelQuery:
    """One target of one panel."""

    board: str
    panel: str
    ref_id: str
    expr: str
    legend: str


def load_dashboards() -> dict[str, dict[str, Any]]:
    """Every dashboard JSON, by file name."""
    return {
        path.name: json.loads(path.read_text(encoding="utf-8"))
        for path in sorted(DASHBOARDS.glob("*.json"))
    }


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    """The board's panels, those inside collapsed rows included."""
    out: list[dict[str, Any]] = []
    for panel in board.get("panels", []):
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def panel_queries(name: str, board: dict[str, Any]) -> list[PanelQuery]:
    """Every target's PromQL of the board."""
    return [
        PanelQuery(name, panel["title"], t["refId"], t["expr"], t.get("legendFormat", ""))
        for panel in panels(board)
        for t in panel.get("targets", [])
    ]


def query_variables(board: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """The board's query variables: name -> (metric, label) of their ``label_values``."""
    found = {}
    for var in board.get("templating", {}).get("list", []):
        if var["type"] != "query":
            continue
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        match = LABEL_VALUES.match(query)
        assert match, f"{var['name']}: only label_values(metric, label) is supported: {query}"
        found[var["name"]] = (match["metric"].strip(), match["label"])
    return found


def expand(expr: str, rate_interval: str, values: dict[str, str] | None = None) -> str:
    """``expr`` as Grafana sends it: ``$__rate_interval`` and every variable replaced
    (``values`` by name, else ``.*``, the "All" of a multi-value variable)."""
    chosen = {"__rate_interval": rate_interval, **(values or {})}

    def value(m: re.Match[str]) -> str:
        name = next(g for g in m.groups() if g)
        return chosen.get(name, ".*")

    return VARIABLE.sub(value, expr)


def dashboard_files() -> list[Path]:
    """The dashboard files, sorted."""
    return sorted(DASHBOARDS.glob("*.json"))


def failing(prom: Prometheus, queries: list[PanelQuery], rate_interval: str) -> list[str]:
    """Why each query fails now (a parse error, or no series); empty when all pass."""
    failures = []
    for q in queries:
        where = f"{q.board} / {q.panel} / {q.ref_id}"
        try:
            if not prom.query(expand(q.expr, rate_interval)):
                failures.append(f"{where}: no series: {q.expr}")
        except QueryError as exc:
            failures.append(f"{where}: {exc}")
    return failures


def wait_for_series(
    prom: Prometheus, queries: list[PanelQuery], rate_interval: str, timeout_s: float
) -> list[str]:
    """Poll until every query returns series or ``timeout_s`` passed; the failures left."""
    deadline = time.monotonic() + timeout_s
    while (failures := failing(prom, queries, rate_interval)) and time.monotonic() < deadline:
        time.sleep(0.5)  # the polling interval: scrapes are a second apart
    return failures


def all_queries() -> list[PanelQuery]:
    """Every target of every dashboard."""
    return [q for name, board in load_dashboards().items() for q in panel_queries(name, board)]
