"""Run ``flexinfer COMMAND ...`` as a real subprocess from async tests, and a kubeconfig for it."""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml


@dataclass(frozen=True)
class Ran:
    """What one ``flexinfer`` run did."""

    code: int
    out: str
    err: str

    def report(self) -> str:
        """For an assertion message."""
        return f"exit {self.code}\n--- stdout\n{self.out}\n--- stderr\n{self.err}"


def cli_env(**extra: str) -> dict[str, str]:
    """The environment without the settings the CLI would otherwise pick up."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("FLEXINFER_SERVER", "FLEXINFER_ADMIN_TOKEN", "KUBECONFIG")}  # fmt: skip
    return {**env, **extra}


async def flexinfer(
    *args: str, stdin: str | None = None, cwd: Path | None = None, env: dict[str, str] | None = None
) -> Ran:
    """``python -m flexinfer_cli ARGS`` to completion (the event loop keeps serving)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "flexinfer_cli", *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, cwd=cwd, env=env if env is not None else cli_env(),
    )  # fmt: skip
    out, err = await asyncio.wait_for(
        proc.communicate(stdin.encode() if stdin is not None else None), 60
    )
    assert proc.returncode is not None
    return Ran(proc.returncode, out.decode(), err.decode())


def write_kubeconfig(path: Path, server: str, *, namespace: str = "default") -> Path:
    """A kubeconfig whose current context points at ``server`` (no credentials)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": server}}],
        "users": [{"name": "tester", "user": {}}],
        "contexts": [
            {"name": name, "context": {"cluster": "fake", "user": "tester", "namespace": ns}}
            for name, ns in (("fake", namespace), ("elsewhere", "other"))
        ],
        "current-context": "fake",
    }  # fmt: skip
    path.write_text(yaml.safe_dump(config))
    return path


def expect_error(ran: Ran, code: int, *phrases: str) -> None:
    """``ran`` failed with ``code`` and one line on stderr holding every phrase, no stdout."""
    assert ran.code == code, ran.report()
    assert ran.err.count("\n") == 1, ran.report()
    for phrase in phrases:
        assert phrase in ran.err, ran.report()
