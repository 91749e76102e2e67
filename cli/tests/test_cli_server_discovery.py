"""Which admin API the resource commands reach: ``--server``, then ``$FLEXINFER_SERVER``, then
the running stack's data dir. Three real HTTP servers each answer with their own Model, so a
flipped order shows as the wrong name (a real subprocess CLI, as a user runs it)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from flexinfer_testing.cli import cli_env, flexinfer

SOURCES = ("flag", "env", "data-dir")


class _ModelList(BaseHTTPRequestHandler):
    """GET /v1/admin/models: one Model named after the server (``server.source``)."""

    server: _AdminStandIn

    def do_GET(self) -> None:
        """The ModelList the CLI's ``get models`` reads."""
        if self.path.split("?")[0] != "/v1/admin/models":
            self.send_error(404)
            return
        model = {
            "apiVersion": "ai.flexinfer/v1alpha2", "kind": "Model",
            "metadata": {"name": f"from-{self.server.source}", "namespace": "default"},
            "spec": {"backend": "reference", "source": "file:///models/tiny"},
        }  # fmt: skip
        body = json.dumps({"apiVersion": "ai.flexinfer/v1alpha2", "kind": "ModelList",
                           "items": [model]}).encode()  # fmt: skip
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


class _AdminStandIn(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, source: str) -> None:
        super().__init__(("127.0.0.1", 0), _ModelList)
        self.source = source

    @property
    def url(self) -> str:
        """Its base URL."""
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def servers() -> Iterator[dict[str, str]]:
    """A running stand-in admin API per source: its URL."""
    running = {source: _AdminStandIn(source) for source in SOURCES}
    threads = [threading.Thread(target=s.serve_forever, args=(0.05,), daemon=True)
               for s in running.values()]  # fmt: skip
    for thread in threads:
        thread.start()
    try:
        yield {source: s.url for source, s in running.items()}
    finally:
        for s in running.values():
            s.shutdown()
            s.server_close()


@pytest.fixture
def data_dir(servers: dict[str, str], tmp_path: Path) -> Path:
    """A running stack's data dir whose endpoints.json names the data-dir server."""
    data = tmp_path / "stack"
    data.mkdir()
    (data / "endpoints.json").write_text(json.dumps({"controller": servers["data-dir"]}))
    return data


async def reached(*args: str, env: dict[str, str]) -> str:
    """The Model names ``get models -o name`` printed: whose server answered."""
    ran = await flexinfer("get", "models", "-o", "name", *args, env=env)
    assert ran.code == 0, ran.report()
    return ran.out


async def test_server_flag_wins_over_the_environment_and_the_data_dir(
    servers: dict[str, str], data_dir: Path
) -> None:
    env = cli_env(FLEXINFER_SERVER=servers["env"])
    out = await reached("--server", servers["flag"], "--data-dir", str(data_dir), env=env)
    assert out == "model.ai.flexinfer/from-flag\n"


async def test_the_environment_wins_over_the_data_dir(
    servers: dict[str, str], data_dir: Path
) -> None:
    env = cli_env(FLEXINFER_SERVER=servers["env"])
    assert await reached("--data-dir", str(data_dir), env=env) == "model.ai.flexinfer/from-env\n"
    via_env = cli_env(FLEXINFER_SERVER=servers["env"], FLEXINFER_DATA_DIR=str(data_dir))
    assert await reached(env=via_env) == "model.ai.flexinfer/from-env\n"


async def test_the_data_dir_is_the_last_resort(data_dir: Path) -> None:
    out = await reached("--data-dir", str(data_dir), env=cli_env())
    assert out == "model.ai.flexinfer/from-data-dir\n"
