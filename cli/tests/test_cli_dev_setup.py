"""``./dev``'s setup reports each step and its time, and one line when nothing is to do."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from flexinfer_testing.repo import repo_root

ROOT = repo_root()
DEV = ROOT / "dev"
DONE = re.compile(r"^dev: (?P<label>.+): done in (?P<took>\d+\.\d+s|\d+s|\d+m\d\ds)$")


def _sourced(script: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``script`` run by bash after sourcing ./dev (which then only defines its functions)."""
    return subprocess.run(
        ["bash", "-c", f'source "{DEV}"\n{script}'],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        check=False,
    )


def test_sourcing_dev_runs_no_command() -> None:
    done = _sourced("echo sourced")
    assert (done.returncode, done.stdout, done.stderr) == (0, "sourced\n", "")


def test_a_step_says_what_it_does_then_how_long_it_took() -> None:
    done = _sourced('step "waiting a moment" "takes minutes on first run" sleep 0.3')
    assert done.returncode == 0, done.stderr
    before, after = done.stderr.splitlines()
    assert before == "dev: waiting a moment (takes minutes on first run) ..."
    match = DONE.match(after)
    assert match is not None, after
    assert match["label"] == "waiting a moment"
    assert 0.3 <= float(match["took"].rstrip("s")) < 10


def test_a_failed_step_says_so_and_stops_the_setup() -> None:
    done = _sourced('step "breaking on purpose" "" sh -c "exit 3"\necho "went on"')
    assert done.returncode == 3
    assert done.stdout == ""
    assert re.fullmatch(
        r"dev: breaking on purpose \.\.\.\ndev: breaking on purpose: failed after \d+\.\ds "
        r"\(exit 3\)\n",
        done.stderr,
    ), done.stderr


@pytest.mark.parametrize(
    ("start", "shown"),
    [
        ("$(now_s)", r"0\.\ds"),
        # Whole seconds ago: the clock may tick once before ``took`` reads it.
        ("$(( $(date +%s) - 12 ))", r"1[23]s"),
        ("$(( $(date +%s) - 125 ))", r"2m0[56]s"),
        ("$(( $(date +%s) - 3725 ))", r"62m0[56]s"),
    ],
)
def test_durations_read_like_a_clock(start: str, shown: str) -> None:
    done = _sourced(f'took "{start}"')
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(shown, done.stdout), done.stdout


def test_making_a_venv_is_a_reported_step(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    done = _sourced(f'make_venv "{venv}"')
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == f"dev: creating the virtual environment {venv} ..."
    assert DONE.match(lines[1]), lines
    assert (venv / "bin" / "python").exists()


def test_setup_when_up_to_date_is_one_line() -> None:
    stamp = ROOT / ".venv" / ".setup-stamp"
    want = _sourced("setup_stamp").stdout.strip()
    if not stamp.exists() or stamp.read_text().strip() != want:
        pytest.skip(
            "this checkout's .venv is not at its current versions: ./dev setup would install"
        )
    done = subprocess.run(
        [str(DEV), "setup"], capture_output=True, text=True, cwd=ROOT, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert done.stderr == f"dev: {ROOT / '.venv'} is up to date\n"


def test_parallel_jobs_run_at_once(tmp_path: Path) -> None:
    # The first job waits for a file only the second creates: run one after the other, it
    # would time out instead of seeing it.
    flag = tmp_path / "second-ran"
    first = f'timeout 60 sh -c "until [ -e {flag} ]; do sleep 0.05; done"; echo saw it'
    done = _sourced(f"run_parallel first '{first}' second 'touch {flag}; echo made it'")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "saw it\nmade it\n"  # each log whole, in the order given
    assert "dev: first: exit 0: saw it" in done.stderr


def test_a_failed_parallel_job_fails_the_run_and_its_summary_comes_last(tmp_path: Path) -> None:
    failing = "echo collecting; echo '=== short test summary info ==='; echo 'FAILED t::x'; exit 3"
    done = _sourced(f'run_parallel ok "echo fine" bad "{failing}"')
    assert done.returncode == 1
    assert "dev: bad: exit 3: FAILED t::x" in done.stderr
    # The failed job's summary is printed again after every log: a CI log's tail shows it.
    assert done.stdout.endswith("=== short test summary info ===\nFAILED t::x\n")
    assert done.stdout.count("FAILED t::x") == 2


def test_pytest_collecting_nothing_is_a_failure() -> None:
    done = _sourced(
        "pytest_run -q -p no:cacheprovider cli/tests/test_cli_dev_setup.py -k no_such_test_here"
    )
    assert done.returncode == 5
    assert done.stderr.endswith("dev: pytest collected no tests\n")


def test_setup_leaves_an_installed_prometheus_alone(tmp_path: Path) -> None:
    (tmp_path / "prometheus").write_text("#!/bin/sh\n")
    (tmp_path / "prometheus").chmod(0o755)
    done = _sourced(f'PATH="{tmp_path}:$PATH"; ensure_prometheus')
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_without_prometheus_or_apt_setup_says_the_dashboard_test_will_skip(
    tmp_path: Path,
) -> None:
    (tmp_path / "id").symlink_to("/usr/bin/id")  # the only tool on PATH: no apt-get
    done = _sourced(f'PATH="{tmp_path}"; ensure_prometheus')
    assert done.returncode == 0, done.stderr
    assert done.stderr == (
        "dev: no prometheus binary (install Debian's prometheus package): the dashboard "
        "query test will skip\n"
    )
