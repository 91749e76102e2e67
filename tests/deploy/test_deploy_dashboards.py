"""The Grafana dashboards hold to Grafana's dashboard JSON model, as its docs describe it.

There is no Grafana here, so the structure Grafana reads is checked field by field: the
top-level fields, the schema version Grafana 11 migrates from, unique panel ids, a 24-column
grid without overlaps, Prometheus targets with an expression and a unique refId, the
provisioned datasource (or the ``$datasource`` variable), known units, defined variables,
and legends that name labels the query keeps. tests/deploy/test_deploy_dashboard_queries.py
runs the expressions themselves against a real Prometheus.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from flexinfer_testing.compose_processes import load_compose
from flexinfer_testing.dashboards import (
    DASHBOARDS,
    DATASOURCE_UID,
    VARIABLE,
    dashboard_files,
    load_dashboards,
    panels,
    query_variables,
)
from flexinfer_testing.repo import repo_root

GRID_COLUMNS = 24
SCHEMA_VERSIONS = range(36, 42)
"""Grafana 10 and 11 write 36-39 (compose.yaml pins 11.3); older ones are migrated on load."""
PANEL_TYPES = {
    "timeseries", "stat", "gauge", "bargauge", "table", "text", "row", "heatmap", "barchart",
    "piechart", "state-timeline", "status-history", "histogram", "logs", "dashlist",
}  # fmt: skip
UNITS = {
    "none", "short", "percent", "percentunit", "s", "ms", "µs", "ns", "m", "h", "d",
    "dtdurations", "bytes", "decbytes", "bits", "Bps", "binBps", "bps", "reqps", "rps",
    "wps", "ops", "cps", "rpm", "opm", "hertz", "locale", "sci",
}  # fmt: skip
"""Unit ids of Grafana's value formats that fit these metrics; ``suffix:<text>`` is the
custom unit."""
BUILTIN_VARIABLES = {"__rate_interval", "__interval", "__range", "__interval_ms"}
VARIABLE_TYPES = {"query", "datasource", "custom", "constant", "interval", "textbox"}
UID = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
BY_CLAUSE = re.compile(r"\bby\s*\(([^)]*)\)")
LEGEND_LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}")

BOARDS = load_dashboards()


def test_there_are_the_four_boards_of_issue_15() -> None:
    assert {b["uid"] for b in BOARDS.values()} == {
        "flexinfer-overview", "flexinfer-cold-start", "flexinfer-gpu-sharing",
        "flexinfer-registry-transfer",
    }  # fmt: skip
    titles = [b["title"] for b in BOARDS.values()]
    assert len(set(titles)) == len(titles), titles


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_top_level_fields(name: str) -> None:
    board = BOARDS[name]
    for key, kind in (("uid", str), ("title", str), ("tags", list), ("timezone", str),
                      ("schemaVersion", int), ("version", int), ("editable", bool),
                      ("time", dict), ("refresh", str), ("panels", list),
                      ("templating", dict), ("annotations", dict)):  # fmt: skip
        assert isinstance(board.get(key), kind), f"{name}: {key} must be a {kind.__name__}"
    assert UID.match(board["uid"]), board["uid"]
    assert name == f"{board['uid']}.json", "the file is named after the uid"
    assert board["schemaVersion"] in SCHEMA_VERSIONS, board["schemaVersion"]
    assert set(board["time"]) == {"from", "to"}
    assert "id" not in board or board["id"] is None, "a provisioned board carries no id"
    assert isinstance(board["templating"]["list"], list)
    assert isinstance(board["annotations"]["list"], list)
    assert board["panels"], f"{name} has no panels"


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_panels_have_unique_ids_and_tile_the_grid(name: str) -> None:
    taken: dict[tuple[int, int], str] = {}
    ids = []
    for panel in panels(BOARDS[name]):
        title = panel.get("title")
        assert isinstance(title, str), f"{name}: a panel without a title"
        assert title.strip(), f"{name}: a panel with an empty title"
        assert panel.get("type") in PANEL_TYPES, f"{title}: type {panel.get('type')}"
        assert isinstance(panel.get("id"), int), f"{title}: id"
        ids.append(panel["id"])
        grid = panel["gridPos"]
        assert all(isinstance(grid[k], int) for k in ("x", "y", "w", "h")), title
        assert min(grid["x"], grid["y"]) >= 0, title
        assert min(grid["w"], grid["h"]) >= 1, title
        assert grid["x"] + grid["w"] <= GRID_COLUMNS, f"{title}: past column {GRID_COLUMNS}"
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in taken, f"{title} overlaps {taken[(x, y)]} at {(x, y)}"
                taken[(x, y)] = title
    assert len(set(ids)) == len(ids), f"{name}: duplicate panel ids {ids}"


def _datasource_ok(ref: Any, variables: dict[str, dict[str, Any]]) -> bool:
    """The provisioned Prometheus by uid, or a datasource variable of type prometheus."""
    if not isinstance(ref, dict) or ref.get("type") != "prometheus":
        return False
    uid = ref.get("uid", "")
    match = re.fullmatch(r"\$\{(\w+)\}|\$(\w+)", uid)
    if match is None:
        return bool(uid == DATASOURCE_UID)
    var = variables.get(match[1] or match[2], {})
    return var.get("type") == "datasource" and var.get("query") == "prometheus"


def _variables(board: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in board["templating"]["list"]}


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_targets_are_prometheus_queries_on_the_provisioned_datasource(name: str) -> None:
    board = BOARDS[name]
    variables = _variables(board)
    for panel in panels(board):
        if panel["type"] in {"row", "text"}:
            continue
        title = panel["title"]
        assert _datasource_ok(panel.get("datasource"), variables), f"{title}: datasource"
        targets = panel.get("targets")
        assert isinstance(targets, list), f"{title}: targets"
        assert targets, f"{title}: no targets"
        refs = [t.get("refId") for t in targets]
        assert all(isinstance(r, str) and r for r in refs), f"{title}: refId"
        assert len(set(refs)) == len(refs), f"{title}: duplicate refIds {refs}"
        for target in targets:
            assert isinstance(target.get("expr"), str), title
            assert target["expr"].strip(), f"{title}: an empty expression"
            assert _datasource_ok(target.get("datasource", panel["datasource"]), variables)
            used = {next(g for g in m.groups() if g) for m in VARIABLE.finditer(target["expr"])}
            undefined = used - set(variables) - BUILTIN_VARIABLES
            assert not undefined, f"{title}: undefined variables {undefined}"


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_legends_name_labels_the_query_keeps(name: str) -> None:
    for panel in panels(BOARDS[name]):
        for target in panel.get("targets", []):
            kept = {
                label.strip()
                for clause in BY_CLAUSE.findall(target["expr"])
                for label in clause.split(",")
            }
            named = set(LEGEND_LABEL.findall(target.get("legendFormat", "")))
            assert named <= kept, f"{panel['title']}: legend {named - kept} is aggregated away"


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_units_are_grafana_units(name: str) -> None:
    for panel in panels(BOARDS[name]):
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
        if panel["type"] in {"row", "text"}:
            continue
        assert isinstance(unit, str), f"{panel['title']}: no unit"
        assert unit in UNITS or unit.startswith("suffix:"), f"{panel['title']}: unit {unit}"


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_template_variables(name: str) -> None:
    board = BOARDS[name]
    names = [v.get("name") for v in board["templating"]["list"]]
    assert len(set(names)) == len(names), names
    variables = _variables(board)
    for var in variables.values():
        assert var.get("type") in VARIABLE_TYPES, var
        assert re.fullmatch(r"\w+", var["name"]), var["name"]
        if var["type"] == "query":
            assert _datasource_ok(var.get("datasource"), variables), var["name"]
    assert "datasource" in variables, "a datasource picker, as Grafana users expect"
    query_variables(board)  # each query variable is a label_values(metric, label)


def test_grafana_provisioning_loads_these_files() -> None:
    provider = yaml.safe_load(
        (repo_root() / "deploy/grafana/provisioning/dashboards/flexinfer.yaml").read_text()
    )
    (entry,) = provider["providers"]
    grafana = load_compose()["services"]["grafana"]
    mounts = dict(v.split(":")[:2] for v in grafana["volumes"])
    assert mounts[f"./{DASHBOARDS.relative_to(repo_root())}"] == entry["options"]["path"]
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home.startswith(entry["options"]["path"] + "/")
    assert (DASHBOARDS / home.rsplit("/", 1)[1]) in dashboard_files()
    datasources = yaml.safe_load(
        (repo_root() / "deploy/grafana/provisioning/datasources/prometheus.yaml").read_text()
    )
    assert [d["uid"] for d in datasources["datasources"]] == [DATASOURCE_UID]
