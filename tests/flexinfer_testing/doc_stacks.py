"""Run the docs' blocks as a reader runs them: at the repository root, next to ``./dev up``.

Each stack is a real ``flexinfer up --port 0`` with its demo, started in a working directory
of its own that looks like the checkout (a symlink to every top-level entry) but holds its
own ``.flexinfer`` data directory, and whose ``.venv/bin`` is the running interpreter's. So
``.flexinfer/admin-token``, ``$PWD/.flexinfer/models``, ``k8s/examples/…`` and
``.venv/bin/flexinfer`` mean in a block what they mean to a reader. Only the documented
default ports differ: ``127.0.0.1:8080`` (and the other services' defaults) are rewritten
to the stack's free ports, and ``flexinfer mx``, which dials ``localhost:8001`` when given
no address, gets the stack's through ``MODEL_EXPRESS_URL``. curl reads a ``.curlrc`` with
``fail-with-body``: an HTTP error fails the block, as the reader would see it fail,
instead of exiting 0.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import openai

from flexinfer_cli.demo import DEMO_NAME
from flexinfer_cli.up import DEFAULT_PORTS
from flexinfer_testing.doc_blocks import DocBlock
from flexinfer_testing.stack import Stack, start_process, stop_stack

Env = tuple[tuple[str, str], ...]

BLOCK_TIMEOUT_S = 120.0
"""A block's longest run: a cold start and a few requests take seconds."""
CURLRC = "fail-with-body\nmax-time = 100\n"
_ADDRESS = re.compile(r"\b(?:127\.0\.0\.1|localhost):(?P<port>\d{2,5})\b")


@dataclass(frozen=True)
class BlockRun:
    """What running one block did."""

    returncode: int
    stdout: str
    stderr: str
    left_running: bool
    """Whether the block left processes behind in its process group (they were killed)."""

    def report(self) -> str:
        """Exit status and output, for an assertion message."""
        return f"exit {self.returncode}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


@dataclass
class DocStack:
    """A running ``flexinfer up`` and the working directory its blocks run in."""

    workdir: Path
    stack: Stack
    shell_env: dict[str, str]
    """The settings of the reader's shell (an env marker), which the stack was started with."""
    curl_home: Path
    """Where curl finds the suite's ``.curlrc``."""

    def substitute(self, text: str) -> str:
        """``text`` with each documented default address replaced by this stack's."""
        by_port = {str(port): name for name, port in DEFAULT_PORTS.items()}

        def address(match: re.Match[str]) -> str:
            name = by_port.get(match["port"])
            if name is None:
                return match[0]
            url = self.stack.urls[name]
            return urlsplit(url).netloc or url

        return _ADDRESS.sub(address, text)

    def environment(self) -> dict[str, str]:
        """The environment of the reader's shell, pointed at this stack."""
        return {
            **os.environ,
            **self.shell_env,
            "CURL_HOME": str(self.curl_home),
            "MODEL_EXPRESS_URL": self.stack.urls["registry_grpc"],
        }

    def run(self, block: DocBlock, timeout: float = BLOCK_TIMEOUT_S) -> BlockRun:
        """Run ``block`` in this stack's working directory; kill what it leaves running."""
        text = self.substitute(block.text)
        argv = (
            ["bash", "-euo", "pipefail", "-c", text]
            if block.kind == "shell"
            else [sys.executable, "-c", text]
        )
        proc = subprocess.Popen(
            argv, cwd=self.workdir, env=self.environment(), text=True, start_new_session=True,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            out, err = proc.communicate()
            err += f"\n[docs suite: the block did not finish within {timeout:.0f}s]"
        return BlockRun(proc.returncode, out, err, _kill_group(proc.pid))

    def check_demo(self) -> None:
        """The demo model still answers, through the openai SDK (raises if not)."""
        tokens = json.loads(self.shell_env.get("FLEXINFER_PROXY_AUTH_TOKENS", "[]"))
        with openai.OpenAI(
            base_url=f"{self.stack.urls['proxy']}/v1",
            api_key=tokens[0] if tokens else "unused",
            timeout=90,
            max_retries=0,
        ) as client:
            reply = client.chat.completions.create(
                model=DEMO_NAME, messages=[{"role": "user", "content": "Hello"}], max_tokens=1
            )
        assert reply.choices, f"the demo model answered without choices: {reply}"


def _kill_group(pgid: int) -> bool:
    """SIGKILL the process group ``pgid``; whether anything was left in it."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def reader_workdir(workdir: Path, repo: Path) -> Path:
    """A directory that looks like the checkout at ``repo`` but for its own ``.flexinfer``.

    Its ``.venv/bin`` is the running interpreter's, so ``.venv/bin/flexinfer`` in a block is
    the code under test even where the suite does not run from the checkout's ``.venv``.
    """
    workdir.mkdir(parents=True)
    for entry in repo.iterdir():
        if entry.name not in (".flexinfer", ".venv"):
            (workdir / entry.name).symlink_to(entry)
    (workdir / ".venv").mkdir()
    (workdir / ".venv" / "bin").symlink_to(Path(sys.executable).parent)
    return workdir


def start_doc_stack(root: Path, repo: Path, env: Env) -> DocStack:
    """``flexinfer up --data-dir WORKDIR/.flexinfer --port 0``, with the demo, from ``env``."""
    curl_home = root / "curl-home"
    curl_home.mkdir(parents=True, exist_ok=True)
    (curl_home / ".curlrc").write_text(CURLRC)
    workdir = reader_workdir(root / "checkout", repo)
    data_dir = workdir / ".flexinfer"
    data_dir.mkdir()
    shell_env = dict(env)
    stack_env = {**os.environ, "FLEXINFER_LOG_LEVEL": "INFO", **shell_env}
    stack = Stack("embedded", data_dir, data_dir / "models" / DEMO_NAME, stack_env)
    try:
        args = ["up", "--data-dir", str(data_dir), "--port", "0"]
        start_process(stack, "up", args, data_dir / "endpoints.json")
    except BaseException:
        stop_stack(stack)
        raise
    return DocStack(workdir, stack, shell_env, curl_home)


@dataclass
class DocStacks:
    """The stacks of the Markdown file being tested: one per set of shell settings.

    Blocks of one file run in document order against the same stacks, so a block that
    breaks what a later one needs fails the later one; the next file starts afresh.
    """

    root: Path
    repo: Path
    path: Path | None = None
    stacks: dict[Env, DocStack] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    """What stopping the stacks found wrong (an engine that outlived its stack)."""
    started: int = 0

    def for_block(self, block: DocBlock) -> DocStack:
        """The stack ``block`` runs against, started on first use."""
        if block.path != self.path:
            self.close()
            self.path = block.path
        stack = self.stacks.get(block.env)
        if stack is None:
            self.started += 1
            stack = start_doc_stack(self.root / f"stack-{self.started}", self.repo, block.env)
            self.stacks[block.env] = stack
        return stack

    def close(self) -> None:
        """Stop every stack of the current file, recording what went wrong."""
        for stack in self.stacks.values():
            try:
                stop_stack(stack.stack)
            except AssertionError as exc:
                self.errors.append(f"{self.path}: {exc}")
        self.stacks.clear()
