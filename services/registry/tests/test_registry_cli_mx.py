"""``flexinfer mx``: exit codes, output formats, strategies, against a real in-process registry."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import socket
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from flexinfer_common.testing.oci_push import ModelPusher
from flexinfer_common.testing.oci_registry import TestRegistry, serve_registry
from flexinfer_registry.client.addresses import TlsNotSupportedError
from flexinfer_registry.client.h2_connection import H2Connection
from flexinfer_registry.client.mx_cli import main, run
from flexinfer_registry.client.mx_client import MxClient, server_address
from flexinfer_registry.client.mx_output import Output
from flexinfer_registry.testing.provider_fixtures import (
    FixtureState,
    ProviderFixture,
    provider_fixture,
)

SHA = "a" * 40
FILES = {"config.json": b'{"x": 1}', "model.safetensors": b"z" * 300_000}


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> dict[str, object]:
        data = json.loads(self.out)
        assert isinstance(data, dict)
        return data


def cli(*argv: str) -> Result:
    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), Output(stdout=out, stderr=err))
    return Result(code, out.getvalue(), err.getvalue())


@pytest.fixture
def closed() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def hub() -> Iterator[ProviderFixture]:
    state = FixtureState()
    state.add_hf("org/model", SHA, FILES)
    with provider_fixture(state) as running:
        yield running


@pytest.mark.parametrize(
    "argv",
    [
        ["health"],
        ["ping"],
        ["model", "list-files", "m"],
        ["model", "download", "m", "--strategy", "ServerOnly"],
    ],
)
def test_unreachable_server_exits_3(closed: str, argv: list[str]) -> None:
    result = cli("--server", closed, *argv)
    assert result.code == 3
    assert result.err.startswith("error: cannot reach the registry at")
    assert result.err.count("\n") == 1


def test_unreachable_json_output(closed: str) -> None:
    result = cli("--server", closed, "--output", "json", "ping")
    assert result.code == 3
    assert result.json()["ok"] is False


@pytest.mark.parametrize(
    "argv",
    [[], ["bogus"], ["model"], ["model", "download"], ["--output", "xml", "ping"],
     ["model", "download", "m", "--strategy", "Nope"], ["model", "clear", "m", "--provider", "x"]],
)  # fmt: skip
def test_usage_errors_exit_2(argv: list[str]) -> None:
    result = cli(*argv)
    assert result.code == 2
    assert result.err.startswith("error: ")


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "model" in capsys.readouterr().out


def test_server_address_precedence() -> None:
    assert server_address(None, {}) == "localhost:8001"
    assert server_address(None, {"MX_SERVER_ADDRESS": "a:1"}) == "a:1"
    both = {"MX_SERVER_ADDRESS": "a:1", "MODEL_EXPRESS_URL": "http://b:2"}
    assert server_address(None, both) == "b:2"
    assert server_address("c:3", both) == "c:3"
    assert server_address("grpc://d:4/", {}) == "d:4"


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A listening socket that records whether anyone connected (it never accepts)."""
    with socket.create_server(("127.0.0.1", 0)) as sock:
        sock.setblocking(False)
        yield sock


def _connected(sock: socket.socket) -> bool:
    try:
        conn, _ = sock.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


@pytest.mark.parametrize("scheme", ["https://", "HTTPS://", "grpcs://"])
def test_tls_addresses_are_refused_never_dialled_in_cleartext(
    listener: socket.socket, scheme: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``https://`` used to be stripped and the call sent in cleartext, token included."""
    port = listener.getsockname()[1]
    address = f"{scheme}127.0.0.1:{port}"
    with pytest.raises(TlsNotSupportedError, match="TLS is not supported"):
        server_address(address, {})
    with pytest.raises(TlsNotSupportedError):
        H2Connection.open(address, time.monotonic() + 5)
    with pytest.raises(TlsNotSupportedError):
        MxClient(address)
    result = cli("--server", address, "--token", "s3cret", "health")
    assert result.code == 2
    assert result.err.count("\n") == 1
    assert "TLS is not supported" in result.err
    monkeypatch.setenv("MODEL_EXPRESS_URL", address)
    assert cli("model", "list-files", "org/m").code == 2
    assert not _connected(listener)


def test_direct_only_uses_the_provider(tmp_path: Path, closed: str) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "config.json").write_text("{}")
    cache = tmp_path / "cache"
    result = cli("--server", closed, "--output", "json", "model", "download", f"file://{src}",
                 "--strategy", "DirectOnly", "--cache-dir", str(cache))  # fmt: skip
    assert result.code == 0, result.err
    data = result.json()
    assert data["strategy"] == "direct"
    assert (Path(str(data["path"])) / "config.json").read_text() == "{}"
    assert Path(str(data["path"])).is_relative_to(cache)


def test_smart_fallback_goes_direct_when_server_is_down(
    tmp_path: Path, closed: str, hub: ProviderFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    result = cli("--server", closed, "--output", "json", "model", "download", "org/model",
                 "--cache-dir", str(tmp_path))  # fmt: skip
    assert result.code == 0, result.err
    assert "downloading directly" in result.err
    data = result.json()
    assert data["resolved_revision"] == SHA
    assert data["total_size"] == sum(len(v) for v in FILES.values())


def test_direct_download_failure_exits_1(tmp_path: Path, closed: str) -> None:
    result = cli("--server", closed, "model", "download", f"file://{tmp_path}/missing",
                 "--strategy", "DirectOnly", "--cache-dir", str(tmp_path / "c"))  # fmt: skip
    assert result.code == 1
    assert "does not exist" in result.err


def test_direct_download_reports_its_size_to_the_termination_log(
    tmp_path: Path, closed: str
) -> None:
    src = tmp_path / "src"
    (src / "w").mkdir(parents=True)
    (src / "config.json").write_text("{}")
    (src / "w" / "model.bin").write_bytes(b"z" * 1000)
    log = tmp_path / "termination-log"
    result = cli("--server", closed, "model", "download", f"file://{src}", "--strategy",
                 "DirectOnly", "--cache-dir", str(tmp_path / "c"),
                 "--termination-log", str(log))  # fmt: skip
    assert result.code == 0, result.err
    assert json.loads(log.read_text()) == {"sizeBytes": 1002}


def test_an_unwritable_termination_log_only_warns(tmp_path: Path, closed: str) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "config.json").write_text("{}")
    log = tmp_path / "missing-dir" / "termination-log"
    result = cli("--server", closed, "model", "download", f"file://{src}", "--strategy",
                 "DirectOnly", "--cache-dir", str(tmp_path / "c"),
                 "--termination-log", str(log))  # fmt: skip
    assert result.code == 0, result.err  # the download itself succeeded
    assert "warning: cannot write" in result.err


@pytest.fixture
async def private_oci() -> AsyncIterator[str]:
    """An OCI registry over http whose token service wants alice's password; its host."""
    registry = TestRegistry(auth="bearer", users={"alice": "s3cret"})
    async with serve_registry(registry) as url:
        await ModelPusher(url, "alice", "s3cret").push_model("org/private", "v1", FILES)
        yield url.removeprefix("http://")


def docker_config(path: Path, host: str, user: str, password: str) -> Path:
    """A docker config.json, as a mounted .dockerconfigjson Secret holds it."""
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    path.write_text(json.dumps({"auths": {host: {"auth": auth}}}))
    return path


async def test_direct_oci_downloads_use_the_registry_settings(
    tmp_path: Path, closed: str, private_oci: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEXINFER_REGISTRY_OCI_INSECURE_REGISTRIES", private_oci)
    argv = ("--server", closed, "model", "download", f"oci://{private_oci}/org/private:v1",
            "--strategy", "DirectOnly", "--cache-dir", str(tmp_path / "c"))  # fmt: skip
    denied = await asyncio.to_thread(cli, *argv)
    assert denied.code == 1
    assert "401" in denied.err

    config = docker_config(tmp_path / "config.json", private_oci, "alice", "s3cret")
    monkeypatch.setenv("FLEXINFER_REGISTRY_OCI_AUTH_FILE", str(config))
    log = tmp_path / "termination-log"
    done = await asyncio.to_thread(cli, *argv, "--termination-log", str(log))
    assert done.code == 0, done.err
    assert json.loads(log.read_text()) == {"sizeBytes": sum(len(v) for v in FILES.values())}
    assert "s3cret" not in done.out + done.err


def test_a_malformed_insecure_list_is_one_line(
    tmp_path: Path, closed: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEXINFER_REGISTRY_OCI_INSECURE_REGISTRIES", "[not json")
    result = cli("--server", closed, "model", "download", "oci://h/r:t", "--strategy",
                 "DirectOnly", "--cache-dir", str(tmp_path))  # fmt: skip
    assert result.code == 1
    assert result.err.count("\n") == 1
    assert "FLEXINFER_REGISTRY_OCI_INSECURE_REGISTRIES" in result.err
