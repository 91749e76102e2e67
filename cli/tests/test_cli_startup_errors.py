"""Every service's start turns invalid settings into one line on stderr and a non-zero exit.

The real commands run as subprocesses, as a user runs them: settings are read in more
places than ``main`` (the bus client's in the event loop, a store's in an app's lifespan),
and a traceback from any of them is the defect.
"""

from __future__ import annotations

import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from flexinfer_testing.stack import flexinfer_command


@dataclass(frozen=True)
class Case:
    """A command, the environment that breaks it, and what its one line must say."""

    command: tuple[str, ...]
    env: dict[str, str]
    says: str
    code: int = 2


def _cases(tmp: Path) -> list[Case]:
    short_tokens = {"FLEXINFER_PROXY_AUTH_TOKENS": '["sk-a","sk-b"]'}
    tokens_line = (
        "invalid setting FLEXINFER_PROXY_AUTH_TOKENS: token #1 has 4 characters; tokens "
        "must have 8 to 4096"
    )
    slow_bus = {"FLEXINFER_BUS_CONNECT_TIMEOUT_S": "soon"}
    bus_line = "invalid setting FLEXINFER_BUS_CONNECT_TIMEOUT_S: Input should be a valid number"
    sqlite = {"FLEXINFER_STORE_URL": f"sqlite:///{tmp / 'store.db'}"}
    return [
        Case(("up", "--data-dir", str(tmp / "up"), "--port", "0"), short_tokens,
             f"flexinfer up: {tokens_line}"),
        Case(("proxy", "--port", "0"), {**sqlite, **short_tokens},
             f"flexinfer proxy: {tokens_line}"),
        # Built inside the event loop, when the bus is opened:
        Case(("proxy", "--port", "0"), {**sqlite, **slow_bus}, f"flexinfer proxy: {bus_line}"),
        Case(("controller", "--port", "0", "--data-dir", str(tmp / "c")), {**sqlite, **slow_bus},
             f"flexinfer controller: {bus_line}"),
        # The variable alone (a flag would win over it):
        Case(("scheduler",), {"FLEXINFER_SCHEDULER_PORT": "x"},
             "flexinfer scheduler: invalid setting FLEXINFER_SCHEDULER_PORT: "),
        Case(("scheduler", "--port", "0"), {"FLEXINFER_LOG_LEVEL": "chatty"},
             "flexinfer scheduler: invalid setting FLEXINFER_LOG_LEVEL: unknown log level"),
        Case(("registry", "--port", "0", "--grpc-port", "0"),
             {"FLEXINFER_REGISTRY_LIMITS_FIELD_CHARS": "3"},
             "flexinfer registry: invalid setting FLEXINFER_REGISTRY_LIMITS_FIELD_CHARS: "),
        # Built in the registry app's lifespan, when its SQL store is opened:
        Case(("registry", "--port", "0", "--grpc-port", "0"),
             {"MX_METADATA_BACKEND": "sql", "FLEXINFER_STORE_POOL_SIZE": "many"},
             "flexinfer registry: invalid setting FLEXINFER_STORE_POOL_SIZE: "),
        # Failing in the lifespan for another reason: still one line, exit 1.
        Case(("registry", "--port", "0", "--grpc-port", "0"),
             {"MX_METADATA_BACKEND": "redis", "REDIS_URL": "redis://127.0.0.1:1/0"},
             "flexinfer registry: redis ping failed", code=1),
        Case(("agent",), {"FLEXINFER_AGENT_PORT": "x"},
             "flexinfer agent: invalid setting FLEXINFER_AGENT_PORT: "),
        Case(("engine", "serve", "--model-dir", str(tmp)), {"FLEXINFER_ENGINE_PORT": "x"},
             "flexinfer engine: invalid setting FLEXINFER_ENGINE_PORT: "),
    ]  # fmt: skip


def _run(case: Case, tmp: Path) -> subprocess.CompletedProcess[str]:
    # Only the case's settings: none of the caller's FLEXINFER_* (or MX_*) may leak in.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLEXINFER_", "MX_"))}
    env.update(case.env)
    return subprocess.run(
        flexinfer_command(*case.command),
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp,  # a default SQLite file lands here, not in the repository
        timeout=60,  # a service that started by mistake would serve until then
        check=False,
    )


def test_every_service_reports_invalid_settings_in_one_line(tmp_path: Path) -> None:
    cases = _cases(tmp_path)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda case: _run(case, tmp_path), cases))
    failures = []
    for case, done in zip(cases, results, strict=True):
        lines = done.stderr.strip().splitlines()
        if done.returncode != case.code or len(lines) != 1 or not lines[0].startswith(case.says):
            failures.append(f"{' '.join(case.command)} {case.env}: exit {done.returncode}, "
                            f"{len(lines)} stderr lines, last: {lines[-1:]}")  # fmt: skip
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("command", [("up", "--port", "0"), ("proxy", "--port", "0")])
def test_the_readme_token_example_fails_before_anything_runs(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    """The README's short-token mistake: nothing generated or served, nothing on stdout."""
    data_dir = tmp_path / "data"
    argv = (*command, "--data-dir", str(data_dir)) if command[0] == "up" else command
    case = Case(argv, {"FLEXINFER_PROXY_AUTH_TOKENS": '["sk-a","sk-b"]'}, "")
    done = _run(case, tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    assert not (data_dir / "models").exists(), "the demo model was generated before the check"
