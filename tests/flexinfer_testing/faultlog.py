"""What each fault test saw, as rows of a reliability table.

A fault test calls ``record(...)`` with what it injected, what the clients saw, and the
seconds until they were answered or the system recovered. With
``FLEXINFER_FAULT_REPORT=<file>`` set, each row is appended to that file as one JSON line;
``PYTHONPATH=tests python -m flexinfer_testing.faultlog <file>`` prints them as a Markdown
table (the one for docs/reliability.md). Without the variable, ``record`` does nothing.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import psutil

REPORT_ENV = "FLEXINFER_FAULT_REPORT"

_COLUMNS = ("fault", "clients", "recovery_s", "rss_mib")


def rss_mib(pid: int) -> float:
    """Resident memory of process ``pid`` in MiB (0 if it is gone)."""
    try:
        return round(psutil.Process(pid).memory_info().rss / (1 << 20), 1)
    except psutil.Error:
        return 0.0


def record(fault: str, clients: object, recovery_s: float | None, **extra: Any) -> None:
    """Append one row (JSON) to $FLEXINFER_FAULT_REPORT, if it is set."""
    target = os.environ.get(REPORT_ENV)
    if not target:
        return
    row = {"fault": fault, "clients": clients, "recovery_s": recovery_s, **extra}
    with Path(target).open("a", encoding="utf-8") as out:
        out.write(json.dumps(row, default=str) + "\n")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_cell(v)}" for k, v in value.items())
    return str(value).replace("|", "\\|")


def markdown(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table; keys beyond the main columns go into "details"."""
    lines = [
        "| fault injected | what clients saw | answered or recovered after (s) | RSS MiB "
        "| details |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        details = {k: v for k, v in row.items() if k not in _COLUMNS}
        cells = [_cell(row.get(c)) for c in _COLUMNS] + [_cell(details)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Print the table of the JSON lines in ``argv[0]``."""
    if len(argv) != 1:
        print("usage: python -m flexinfer_testing.faultlog REPORT.jsonl", file=sys.stderr)
        return 2
    rows = [json.loads(line) for line in Path(argv[0]).read_text().splitlines() if line]
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
