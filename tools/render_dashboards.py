"""Render each Grafana dashboard of deploy/grafana/dashboards to a PNG, from a real Prometheus.

Grafana is not packaged for these machines, so each panel's PromQL is run over a time range
through Prometheus's HTTP API (template variables as "All") and plotted with matplotlib:
one figure per dashboard, one subplot per panel where the panel's grid puts it.

    python tools/render_dashboards.py --prometheus http://localhost:9090 --since 1h
    python tools/render_dashboards.py --demo     # docs/images/, as docs/dashboards.md shows

``--demo`` starts what tests/deploy/test_deploy_dashboard_queries.py starts (compose.yaml's
topology as processes, on the machine's Redis and PostgreSQL, and Debian's prometheus
scraping it), drives the same traffic through the proxy, and renders that.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # flexinfer_testing: the stack the test starts

import httpx  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")  # files only: no display here
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.ticker import FuncFormatter, PercentFormatter  # noqa: E402

from flexinfer_testing.dashboards import (  # noqa: E402
    all_queries,
    expand,
    load_dashboards,
    panels,
    wait_for_series,
)
from flexinfer_testing.prometheus import (  # noqa: E402
    Prometheus,
    QueryError,
    prometheus_binary,
)

OUT = ROOT / "docs" / "images"
GRID_COLUMNS = 24
ROW_INCHES = 0.36
"""Height of one Grafana grid row in the figure (a panel of h=8 is about 2.5 inches)."""
WIDTH_INCHES = 18.0
DEMO_RATE_INTERVAL = "15s"
"""``$__rate_interval`` for the demo's one-second scrapes: four scrapes and then some, short
enough that a minute of traffic shows its shape."""
DEMO_SWAPS = 3
"""GPU swaps the demo's traffic makes (each starts an engine: seconds)."""
DEMO_STEADY_S = 45.0
"""Then warm traffic for this long, so that rates show over time."""
LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")
BYTE_STEPS = ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))


def _bytes(value: float, _pos: float) -> str:
    for size, name in BYTE_STEPS:
        if abs(value) >= size:
            return f"{value / size:.1f} {name}"
    return f"{value:.0f} B"


def _clock(value: float, _pos: float) -> str:
    return datetime.fromtimestamp(value).strftime("%H:%M:%S")


def _style_axis(ax: Axes, unit: str) -> None:
    """Tick labels in the panel's unit, as Grafana formats them."""
    if unit == "percentunit":
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    elif unit in {"bytes", "Bps"}:
        ax.yaxis.set_major_formatter(FuncFormatter(_bytes))
    suffix = {"s": "seconds", "Bps": "per second", "reqps": "requests/s", "ops": "ops/s"}
    label = unit.removeprefix("suffix:").strip() if unit.startswith("suffix:") else suffix.get(unit)
    if label:
        ax.set_ylabel(label, fontsize=8)
    ax.xaxis.set_major_formatter(FuncFormatter(_clock))
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)


def legend_of(legend_format: str, labels: dict[str, str]) -> str:
    """A series' name as Grafana writes it from the target's legendFormat."""
    if not legend_format:
        return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
    # The proxy labels a request whose model it did not know with model="".
    return LEGEND.sub(lambda m: labels.get(m[1]) or f'{m[1]}=""', legend_format)


def plot_panel(ax: Axes, prom: Prometheus, panel: dict[str, Any], window: tuple[float, float],
               step_s: float, rate_interval: str) -> int:  # fmt: skip
    """Plot every target of ``panel`` on ``ax``; the number of series drawn."""
    drawn = 0
    for target in panel.get("targets", []):
        expr = expand(target["expr"], rate_interval)
        try:
            result = prom.query_range(expr, window[0], window[1], step_s)
        except QueryError as exc:
            ax.text(0.5, 0.5, f"query error: {exc}", ha="center", transform=ax.transAxes)
            continue
        for series in result:
            times = [float(t) for t, _ in series["values"]]
            values = [float(v) for _, v in series["values"]]
            label = legend_of(target.get("legendFormat", ""), series["metric"])
            ax.plot(times, values, label=label, linewidth=1.4, marker=".", markersize=2)
            drawn += 1
    ax.set_title(panel["title"], fontsize=10, loc="left")
    _style_axis(ax, panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short"))
    if drawn:
        ax.legend(fontsize=7, loc="upper left", ncol=2, framealpha=0.6)
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    return drawn


def render(board: dict[str, Any], prom: Prometheus, window: tuple[float, float],
           step_s: float, rate_interval: str, out: Path) -> Path:  # fmt: skip
    """One PNG of ``board``: its panels on its grid, titled like it."""
    shown = [p for p in panels(board) if p.get("type") not in {"row", "text"}]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in shown)
    fig = plt.figure(figsize=(WIDTH_INCHES, rows * ROW_INCHES + 1.0))
    grid = fig.add_gridspec(rows, GRID_COLUMNS, hspace=0, wspace=0)
    for panel in shown:
        pos = panel["gridPos"]
        # The panel's cells less a margin: a row above for the title, one below for the
        # time axis, a column on the left for the unit.
        cells = grid[pos["y"] + 1 : pos["y"] + pos["h"] - 1, pos["x"] + 1 : pos["x"] + pos["w"]]
        ax = fig.add_subplot(cells)
        plot_panel(ax, prom, panel, window, step_s, rate_interval)
        ax.set_xlim(window[0], window[1])
        if ax.get_ylim()[0] > 0 or (ax.get_ylim()[0] < 0 < ax.get_ylim()[1]):
            ax.set_ylim(bottom=0)  # as Grafana's default for these non-negative series
    start, end = (datetime.fromtimestamp(t).strftime("%H:%M:%S") for t in window)
    fig.suptitle(f"{board['title']}  ({start} to {end}, Prometheus)", fontsize=14, x=0.01,
                 ha="left")  # fmt: skip
    fig.subplots_adjust(left=0.01, right=0.99, top=1 - 0.5 / (rows * ROW_INCHES + 1.0),
                        bottom=0.01)  # fmt: skip
    path = out / f"{board['uid']}.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def render_all(prom: Prometheus, window: tuple[float, float], step_s: float,
               rate_interval: str, out: Path) -> list[Path]:  # fmt: skip
    """Every dashboard, rendered into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    return [
        render(board, prom, window, step_s, rate_interval, out)
        for board in load_dashboards().values()
    ]


def _seconds(text: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([smh])", text)
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r}: a duration such as 90s, 15m or 2h")
    return float(match[1]) * {"s": 1, "m": 60, "h": 3600}[match[2]]


def demo(out: Path) -> list[Path]:
    """Start the test's stack and Prometheus, drive its traffic, render what was scraped."""
    from flexinfer_testing.dashboard_stack import (
        SHARED,
        dashboard_stack,
        drive_traffic,
        steady_traffic,
    )

    binary = prometheus_binary()
    if binary is None:
        raise SystemExit("render_dashboards: --demo needs Debian's prometheus (./dev setup)")
    with (
        tempfile.TemporaryDirectory(prefix="flexinfer-dash-") as tmp,
        dashboard_stack(Path(tmp), binary) as (procs, prom),
    ):
        start = time.time()
        asyncio.run(drive_traffic(procs, swaps=DEMO_SWAPS))
        asyncio.run(steady_traffic(procs, SHARED[DEMO_SWAPS % 2], DEMO_STEADY_S))
        failures = wait_for_series(prom, all_queries(), DEMO_RATE_INTERVAL, 30.0)
        if failures:
            print("render_dashboards: panels without data:", *failures, sep="\n  ")
        return render_all(prom, (start - 5, time.time()), 1.0, DEMO_RATE_INTERVAL, out)


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, render, and say where the files went."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--prometheus", metavar="URL", help="a Prometheus to query")
    source.add_argument("--demo", action="store_true", help="start a stack and Prometheus")
    parser.add_argument("--since", type=_seconds, default=3600.0, help="range (default 1h)")
    parser.add_argument("--step", type=_seconds, default=15.0, help="resolution (default 15s)")
    parser.add_argument("--rate-interval", default="1m", help="$__rate_interval (default 1m)")
    parser.add_argument("--out", type=Path, default=OUT, help="folder (default docs/images)")
    args = parser.parse_args(argv)
    if args.demo:
        paths = demo(args.out)
    else:
        prom = Prometheus(args.prometheus.rstrip("/"))
        try:
            prom.query("vector(1)")
        except (httpx.HTTPError, QueryError, ValueError) as exc:
            print(f"render_dashboards: {args.prometheus} does not answer queries: {exc}",
                  file=sys.stderr)  # fmt: skip
            return 1
        end = time.time()
        paths = render_all(prom, (end - args.since, end), args.step, args.rate_interval, args.out)
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
