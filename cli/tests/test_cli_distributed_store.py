"""Distributed mode as the README shows it, on a fresh PostgreSQL without the database."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from flexinfer_testing.services import absent_postgres_database, database_exists, postgres_role
from flexinfer_testing.stack import START_TIMEOUT_S, flexinfer_command, stop_process, wait_for_file

pytestmark = pytest.mark.postgres


def _env(store_url: str, ready_file: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEXINFER_")}
    env.update({"FLEXINFER_STORE_URL": store_url, "FLEXINFER_READY_FILE": str(ready_file)})
    return env


@contextmanager
def _started(tmp: Path, commands: dict[str, list[str]], store_url: str) -> Iterator[None]:
    """Start every ``flexinfer`` command at once, wait until each serves, stop them after."""
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name, args in commands.items():
            with (tmp / f"{name}.log").open("wb") as out:
                procs[name] = subprocess.Popen(
                    flexinfer_command(*args, "--port", "0"),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=_env(store_url, tmp / f"{name}.ready.json"),
                )
        for name, proc in procs.items():
            wait_for_file(tmp / f"{name}.ready.json", proc, START_TIMEOUT_S)
        yield
    finally:
        codes = {name: stop_process(proc) for name, proc in procs.items()}
        logs = {name: (tmp / f"{name}.log").read_text()[-1500:] for name in procs}
        assert set(codes.values()) <= {0}, (codes, logs)


def test_services_starting_together_create_the_database_once(tmp_path: Path) -> None:
    # Two controllers and a proxy start at once: all race to create the database.
    commands = {
        "controller-a": ["controller", "--data-dir", str(tmp_path / "a")],
        "controller-b": ["controller", "--data-dir", str(tmp_path / "b")],
        "proxy": ["proxy"],
    }
    with absent_postgres_database() as (url, name):
        assert not database_exists(name)
        with _started(tmp_path, commands, url):
            assert database_exists(name)
        created = [
            service
            for service in commands
            if "created the PostgreSQL database" in (tmp_path / f"{service}.log").read_text()
        ]
        assert len(created) == 1, created


def test_a_role_that_may_not_create_it_gets_the_createdb_command(tmp_path: Path) -> None:
    with absent_postgres_database() as (url, name), postgres_role() as role:
        parts = urlsplit(url)
        as_role = urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port}"))
        done = subprocess.run(
            flexinfer_command("controller", "--port", "0", "--data-dir", str(tmp_path / "c")),
            capture_output=True,
            text=True,
            env=_env(as_role, tmp_path / "ready.json"),
            timeout=120,
            check=False,
        )
        assert done.returncode == 1
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0].startswith(f'flexinfer controller: database "{name}" does not exist')
        assert f"createdb -h {parts.hostname} -p {parts.port} -O {role} {name}" in lines[0]
        assert not database_exists(name)
