"""A real Prometheus server (Debian's ``prometheus`` binary) as a local process.

Its configuration is deploy/prometheus/prometheus.yml, compose's own, with each
``service:port`` target translated to the local port that stands for it
(:class:`~flexinfer_testing.compose_processes.ComposeProcesses`) and the scrape and
service-discovery intervals shortened to a second, so that a test sees data within seconds.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from flexinfer_testing.ports import free_port
from flexinfer_testing.repo import repo_root
from flexinfer_testing.stack import stop_process

CONFIG = repo_root() / "deploy" / "prometheus" / "prometheus.yml"
INTERVAL = "1s"
"""Scrape, evaluation and HTTP service discovery interval: seconds of traffic are enough."""
READY_TIMEOUT_S = 30.0


def prometheus_binary() -> str | None:
    """The ``prometheus`` executable on PATH (Debian's package), or None."""
    return shutil.which("prometheus")


def local_config(addresses: Callable[[str], str]) -> dict[str, Any]:
    """deploy/prometheus/prometheus.yml with local addresses and one-second intervals."""
    config: dict[str, Any] = yaml.safe_load(addresses(CONFIG.read_text(encoding="utf-8")))
    config["global"] = {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL}
    for job in config["scrape_configs"]:
        for sd in job.get("http_sd_configs", []):
            sd["refresh_interval"] = INTERVAL
    return config


class QueryError(Exception):
    """Prometheus refused a query (a parse or evaluation error), with its message."""


@dataclass
class Prometheus:
    """A server's HTTP API (and its process and log, when this started it)."""

    url: str
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """The instant vector (or scalar, as one sample) ``expr`` evaluates to."""
        params = {"query": expr} | ({} if at is None else {"time": f"{at:.3f}"})
        return self._get("/api/v1/query", params)

    def query_range(
        self, expr: str, start: float, end: float, step_s: float
    ) -> list[dict[str, Any]]:
        """The range vector of ``expr`` over ``[start, end]`` every ``step_s`` seconds."""
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": step_s}
        return self._get("/api/v1/query_range", params)

    def label_values(self, label: str, metric: str) -> list[str]:
        """What Grafana's ``label_values(metric, label)`` lists."""
        response = httpx.get(
            f"{self.url}/api/v1/label/{label}/values", params={"match[]": metric}, timeout=10
        )
        body = response.json()
        if body.get("status") != "success":
            raise QueryError(f"label_values({metric}, {label}): {body.get('error', body)}")
        values: list[str] = body["data"]
        return values

    def _get(self, path: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        body = httpx.get(f"{self.url}{path}", params=params, timeout=30).json()
        if body.get("status") != "success":
            raise QueryError(f"{body.get('errorType')}: {body.get('error')}")
        data = body["data"]
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        result: list[dict[str, Any]] = data["result"]
        return result

    def targets_up(self) -> dict[str, bool]:
        """Each active target's job (and instance): whether its last scrape succeeded."""
        body = httpx.get(f"{self.url}/api/v1/targets", timeout=10).json()
        return {
            f"{t['labels']['job']} {t['labels']['instance']}": t["health"] == "up"
            for t in body["data"]["activeTargets"]
        }

    def wait_scraped(self, jobs: set[str], timeout_s: float) -> None:
        """Poll until each of ``jobs`` has a target whose scrape succeeded: a counter's
        first increase after this is seen as one (from the 0 scraped before it)."""
        deadline = time.monotonic() + timeout_s
        while True:
            up = {key.split(" ")[0] for key, healthy in self.targets_up().items() if healthy}
            if jobs <= up:
                return
            assert time.monotonic() < deadline, f"never scraped: {sorted(jobs - up)}"
            time.sleep(0.2)  # the polling interval: scrapes are a second apart

    def tail(self) -> str:
        """The end of the server's log."""
        return "" if self.log is None else self.log.read_text(errors="replace")[-3000:]


@contextmanager
def run_prometheus(binary: str, workdir: Path, config: dict[str, Any]) -> Iterator[Prometheus]:
    """Prometheus on a free loopback port with ``config``, ready; stopped on exit."""
    workdir.mkdir(parents=True, exist_ok=True)
    config_file = workdir / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config), encoding="utf-8")
    port = free_port()
    log = workdir / "prometheus.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [binary, f"--config.file={config_file}",
             f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=out, stderr=out, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    server = Prometheus(f"http://127.0.0.1:{port}", proc, log)
    try:
        _wait_ready(server, proc)
        yield server
    finally:
        stop_process(proc)


def _wait_ready(server: Prometheus, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        assert proc.poll() is None, f"prometheus exited: {server.tail()}"
        try:
            if httpx.get(f"{server.url}/-/ready", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, f"prometheus not ready: {server.tail()}"
        time.sleep(0.2)  # the polling interval, not a wait for an outcome
