"""docs/troubleshooting.md's metric table lists every family the code defines, as exported
(type and labels included), and no doc table names a family that does not exist."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from flexinfer_common.settings import TelemetrySettings
from flexinfer_common.telemetry import setup_telemetry
from flexinfer_testing.metric_families import Family, source_families
from flexinfer_testing.repo import repo_root

ROOT = repo_root()
PAGE = ROOT / "docs" / "troubleshooting.md"
SECTION = "## What each metric means"
METRIC = re.compile(r"`((?:flexinfer|mx|http)_[a-z0-9_]*[a-z0-9])`")


def _table_rows(text: str) -> list[list[str]]:
    """The cells of every Markdown table row (header and rule lines excluded)."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def _documented() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Family -> (type, labels) from the troubleshooting page's metric table."""
    text = PAGE.read_text().split(SECTION, 1)[1].split("\n## ", 1)[0]
    table = {}
    for cells in _table_rows(text)[1:]:
        (name,) = METRIC.findall(cells[0])
        labels = tuple(re.findall(r"`([a-z_]+)`", cells[2]))
        table[name] = (cells[1], labels)
    return table


def _instrumented() -> dict[str, Family]:
    """The families every FastAPI service exports through the shared telemetry setup,
    read from a real scrape after one request."""
    app = FastAPI()

    @app.get("/ping")
    def ping() -> dict[str, str]:
        return {}

    setup_telemetry(app, "docs", TelemetrySettings())
    client = TestClient(app)
    assert client.get("/ping").status_code == 200
    found = {}
    for family in text_string_to_metric_families(client.get("/metrics").text):
        if family.name.endswith("_created"):
            continue  # prometheus_client's creation timestamps, one per family
        name = family.name + ("_total" if family.type == "counter" else "")
        labels = {k for s in family.samples for k in s.labels if k not in ("le", "quantile")}
        found[name] = Family(name, family.type, tuple(sorted(labels)), family.documentation, PAGE)
    return found


def test_every_family_in_the_code_is_documented() -> None:
    code = source_families(ROOT)
    assert len(code) > 40, "the source scan found the services' metrics"
    missing = sorted(set(code) - set(_documented()))
    assert missing == [], f"add these families to {SECTION!r} in docs/troubleshooting.md: {missing}"


def test_every_documented_family_exists_with_its_type_and_labels() -> None:
    known = {**_instrumented(), **source_families(ROOT)}
    wrong = []
    for name, (kind, labels) in _documented().items():
        family = known.get(name)
        if family is None:
            wrong.append(f"{name}: no such family in the code")
        elif family.kind != kind:
            wrong.append(f"{name}: a {family.kind}, documented as a {kind}")
        elif family.labels is not None and sorted(family.labels) != sorted(labels):
            wrong.append(f"{name}: labels {family.labels}, documented as {labels}")
    assert wrong == [], wrong


def test_no_doc_table_names_a_missing_family() -> None:
    known = {**_instrumented(), **source_families(ROOT)}
    pages: list[Path] = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    unknown = {
        f"{page.name}: {name}"
        for page in pages
        for cells in _table_rows(page.read_text())
        for name in METRIC.findall(cells[0])
        if name not in known
    }
    assert unknown == set(), unknown
