"""``flexinfer logs model NAME -f`` on Kubernetes: a real CLI subprocess following a pod's log
on the fake apiserver, which streams what is appended until the pod goes; Ctrl-C exits 130."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from flexinfer_common.testing.kube_apiserver import KubeApiServer, find_crd_dir
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture
from flexinfer_testing.cli import cli_env, write_kubeconfig

apiserver = kube_apiserver_fixture([find_crd_dir(Path(__file__))])
Process = asyncio.subprocess.Process


@pytest.fixture
async def following(apiserver: KubeApiServer, tmp_path: Path) -> AsyncIterator[Process]:
    """``flexinfer logs model a -f`` on the pod ``a-1``, once it printed the log so far."""
    apiserver.create("models", {
        "apiVersion": "ai.flexinfer/v1alpha2", "kind": "Model", "metadata": {"name": "a"},
        "spec": {"backend": "vllm", "source": "hf://org/a"},
    })  # fmt: skip
    apiserver.create("pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "a-1", "labels": {"flexinfer.ai/model": "a"}},
        "spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai"}]},
    })  # fmt: skip
    apiserver.set_pod_log("default", "a-1", "loading\n")
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", apiserver.url)
    with sigint_as_a_terminal_has_it():
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "flexinfer_cli", "logs", "model", "a", "-f",
            "--kubeconfig", str(kubeconfig),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=cli_env(),
        )  # fmt: skip
    try:
        assert await next_line(proc) == "loading\n"
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


@contextlib.contextmanager
def sigint_as_a_terminal_has_it() -> Iterator[None]:
    """Start children with SIGINT at its default, as a shell in a terminal does.

    A suite started in the background (``./dev test &``, nohup, some CI runners) inherits
    SIGINT ignored, and so would the CLI (as POSIX wants of background jobs): Ctrl-C
    could then never reach it. A handled signal is reset to its default across exec.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


async def next_line(proc: Process) -> str:
    """The next line the CLI prints (bounded, so a hang fails instead of stalling)."""
    assert proc.stdout is not None
    return (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()


async def finished(proc: Process) -> tuple[int, str, str]:
    """Exit code, the rest of stdout, and stderr, once the CLI exits."""
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_follow_prints_what_is_appended_until_the_pod_goes(
    apiserver: KubeApiServer, following: Process
) -> None:
    apiserver.append_pod_log("default", "a-1", "ready on :8000\n")
    assert await next_line(following) == "ready on :8000\n"
    apiserver.append_pod_log("default", "a-1", "GET /v1/models 200\n")
    assert await next_line(following) == "GET /v1/models 200\n"

    apiserver.delete("pods", "default", "a-1")  # its container is gone: the stream ends
    code, rest, err = await finished(following)
    assert (code, rest, err) == (0, "", "")


async def test_ctrl_c_exits_130_without_a_traceback(following: Process) -> None:
    following.send_signal(signal.SIGINT)
    code, rest, err = await finished(following)
    assert code == 130, err
    assert rest == ""
    assert "Traceback" not in err
    assert err.count("\n") <= 1, err
