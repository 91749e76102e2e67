"""Services started with a bus they cannot use: they must exit, not serve without it.

``flexinfer controller`` and ``flexinfer proxy`` run as subprocesses, the way a supervisor
starts them, with a SQLite store of their own so only the bus is wrong.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from flexinfer_testing import faultlog
from flexinfer_testing.ports import free_port
from flexinfer_testing.stack import flexinfer_command, stop_process

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

CONNECT_TIMEOUT_S = 1.0


def start_both(tmp_path: Path, bus_url: str) -> dict[str, subprocess.Popen[bytes]]:
    """The controller and the proxy, started at once with ``bus_url``; each one's stderr
    goes to ``<tmp_path>/<service>/stderr.log``."""
    procs = {}
    for service in ("controller", "proxy"):
        workdir = tmp_path / service
        workdir.mkdir()
        env = {
            "FLEXINFER_BUS_URL": bus_url,
            "FLEXINFER_BUS_CONNECT_TIMEOUT_S": str(CONNECT_TIMEOUT_S),
            "FLEXINFER_STORE_URL": f"sqlite:///{workdir / 'store.db'}",
            "FLEXINFER_CONTROLLER_DATA_DIR": str(workdir / "data"),
            "PATH": "/usr/bin:/bin",
        }
        with (workdir / "stderr.log").open("wb") as err:
            procs[service] = subprocess.Popen(
                flexinfer_command(service, "--port", "0"),
                env=env,
                cwd=workdir,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
    return procs


def exits(
    tmp_path: Path, procs: dict[str, subprocess.Popen[bytes]], within_s: float
) -> dict[str, str]:
    """Each service's exit code and last stderr line; a service still running after
    ``within_s`` is stopped and reported as such."""
    deadline = time.monotonic() + within_s
    outcome = {}
    for service, proc in procs.items():
        try:
            proc.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            stop_process(proc)
            outcome[service] = "still serving"
            continue
        log = (tmp_path / service / "stderr.log").read_text(errors="replace")
        lines = log.strip().splitlines()
        outcome[service] = f"exit {proc.returncode}: {lines[-1] if lines else ''}"
    return outcome


def check_one_line_exit(outcome: dict[str, str], *needles: str) -> None:
    """Both services exited non-zero with one readable line naming their program and
    every needle."""
    for service, result in outcome.items():
        assert result.startswith("exit "), (service, result)
        assert not result.startswith("exit 0:"), (service, result)
        line = result.split(": ", 1)[1]
        # Named as it was invoked: `flexinfer controller`, not its script flexinfer-controller.
        assert line.startswith(f"flexinfer {service}: "), (service, result)
        for needle in needles:
            assert needle in line, (service, result)


def test_a_malformed_bus_url_fails_the_start_with_one_line(tmp_path: Path) -> None:
    """Injected: FLEXINFER_BUS_URL=redis://127.0.0.1:notaport/0. Asserted: controller and
    proxy both exit non-zero at once, each with one line that says what is wrong."""
    started = time.monotonic()
    outcome = exits(tmp_path, start_both(tmp_path, "redis://127.0.0.1:notaport/0"), 120)
    faultlog.record("start with a malformed bus URL", outcome, time.monotonic() - started)
    check_one_line_exit(outcome, "invalid bus URL", "notaport")


@pytest.mark.slow
def test_an_unreachable_bus_fails_the_start_after_the_connect_timeout(tmp_path: Path) -> None:
    """Injected: FLEXINFER_BUS_URL names a port nothing listens on, with a 1 s connect
    timeout. Asserted: controller and proxy both exit non-zero, each with one line naming
    the Redis they could not reach and the 1 s they waited (the default is 20 s).

    The bound on the wall clock only catches a hang: a busy machine can take many seconds
    just to import a service, so the line, not the clock, proves the setting was used."""
    port = free_port()
    started = time.monotonic()
    outcome = exits(tmp_path, start_both(tmp_path, f"redis://127.0.0.1:{port}/0"), 120)
    faultlog.record("start with an unreachable bus", outcome, time.monotonic() - started)
    check_one_line_exit(
        outcome,
        f"127.0.0.1:{port}/0",
        f"still failing after {CONNECT_TIMEOUT_S:g} s",
        "FLEXINFER_BUS_CONNECT_TIMEOUT_S",
    )
