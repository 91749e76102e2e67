"""The real process: CLI generate, serve with --ready-fd, the official openai SDK, shutdown."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from flexinfer_engine.__main__ import main

NAME = "proc-model"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("proc") / "model"
    assert main(["generate", "proc", "--out", str(out), "--preset", "tiny", "--seed", "3"]) == 0
    return out


def _read_ready(fd: int, proc: subprocess.Popen[bytes], timeout: float) -> dict[str, Any]:
    readable, _, _ = select.select([fd], [], [], timeout)
    assert readable, "no ready line in time"
    data = b""
    while chunk := os.read(fd, 4096):  # the engine closes the fd after one line
        data += chunk
    assert data, f"engine exited with {proc.poll()} before it was ready"
    assert data.count(b"\n") == 1
    line: dict[str, Any] = json.loads(data)
    return line


@pytest.fixture(scope="module")
def server(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    read_fd, write_fd = os.pipe()
    log = (tmp_path_factory.mktemp("log") / "engine.log").open("wb")
    command = [
        sys.executable,
        "-m",
        "flexinfer_engine",
        "serve",
        "--model-dir",
        str(model_dir),
        "--served-model-name",
        NAME,
        "--port",
        "0",
        "--ready-fd",
        str(write_fd),
    ]
    proc = subprocess.Popen(command, pass_fds=(write_fd,), stdout=log, stderr=log)
    os.close(write_fd)
    try:
        ready = _read_ready(read_fd, proc, timeout=60)
        yield ready
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(read_fd)
        log.close()


def test_ready_line(server: dict[str, Any]) -> None:
    assert set(server) == {"pid", "url", "port", "process_start_seconds", "weight_load_seconds"}
    assert server["url"] == f"http://127.0.0.1:{server['port']}"
    assert server["port"] > 0
    assert 0 < server["process_start_seconds"] < 60
    assert 0 < server["weight_load_seconds"] < 1
    info = httpx.get(server["url"] + "/engine/info", timeout=5).json()
    assert info["pid"] == server["pid"]
    assert info["model"] == NAME
    assert info["sleeping"] is False


def test_openai_sdk_chat(server: dict[str, Any]) -> None:
    with OpenAI(base_url=server["url"] + "/v1", api_key="unused", max_retries=0) as client:
        assert [m.id for m in client.models.list()] == [NAME]
        completion = client.chat.completions.create(
            model=NAME, messages=[{"role": "user", "content": "Hi!"}], max_tokens=16, seed=5
        )
        assert completion.choices[0].finish_reason == "length"
        text = completion.choices[0].message.content
        assert text
        assert completion.usage is not None
        assert completion.usage.completion_tokens == 16
        stream = client.chat.completions.create(
            model=NAME,
            messages=[{"role": "user", "content": "Hi!"}],
            max_tokens=16,
            seed=5,
            stream=True,
        )
        streamed = "".join(
            chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices
        )
        assert streamed == text


def _tokens_total(url: str) -> float:
    for line in httpx.get(url + "/metrics", timeout=5).text.splitlines():
        if line.startswith("flexinfer_engine_generated_tokens_total "):
            return float(line.split()[1])
    raise AssertionError("no token counter")


def test_client_disconnect_stops_generation(server: dict[str, Any]) -> None:
    url = server["url"]
    before = _tokens_total(url)
    request = {"model": NAME, "prompt": "a", "max_tokens": 500, "stream": True, "seed": 1}
    with (
        httpx.Client(timeout=10) as http,
        http.stream("POST", url + "/v1/completions", json=request) as response,
    ):
        assert next(response.iter_lines()).startswith("data: ")
    # The next request queues behind the abandoned one, so it runs only once that one stopped.
    small = {"model": NAME, "prompt": "b", "max_tokens": 1}
    assert httpx.post(url + "/v1/completions", json=small, timeout=30).status_code == 200
    generated = _tokens_total(url) - before
    assert generated < 400


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--model-dir", str(tmp_path / "missing")]) == 1
    assert "config.json" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["generate", "x", "--out", str(tmp_path), "--preset", "huge"])


def test_an_engine_whose_supervisor_is_gone_exits_instead_of_serving_unannounced(
    model_dir: Path, tmp_path: Path
) -> None:
    """The ready pipe's reader (the controller that spawned it) died before the engine was
    ready: nobody will ever route to it, so it must exit rather than linger as an orphan."""
    read_fd, write_fd = os.pipe()
    os.close(read_fd)
    log = tmp_path / "engine.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "flexinfer_engine", "serve", "--model-dir", str(model_dir),
             "--port", "0", "--ready-fd", str(write_fd)],
            pass_fds=(write_fd,), stdout=out, stderr=out,
        )  # fmt: skip
    os.close(write_fd)
    try:
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    errors = [line for line in log.read_text().splitlines() if "flexinfer-engine: error" in line]
    assert code == 1
    assert len(errors) == 1
    assert errors[0].startswith("flexinfer-engine: error: cannot report readiness on fd")
