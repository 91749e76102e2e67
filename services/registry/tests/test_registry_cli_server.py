"""``flexinfer mx`` against a real registry started in-process (gRPC + HF fixture behind it)."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from flexinfer_common.serving import serve_in_background
from flexinfer_registry.adapters.providers import builtin_providers
from flexinfer_registry.app import create_app
from flexinfer_registry.client.mx_cli import run
from flexinfer_registry.client.mx_output import Output
from flexinfer_registry.core.providers.base import ProviderConfig
from flexinfer_registry.settings import RegistrySettings
from flexinfer_registry.testing.provider_fixtures import (
    FixtureState,
    ProviderFixture,
    provider_fixture,
)

SHA = "a" * 40
FILES = {"config.json": b'{"x": 1}', "model.safetensors": b"z" * 300_000}


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), Output(stdout=out, stderr=err))
    return code, out.getvalue(), err.getvalue()


class Result:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err

    def json(self) -> dict[str, object]:
        data = json.loads(self.out)
        assert isinstance(data, dict)
        return data


async def acli(*argv: str) -> Result:
    """Run the (blocking) CLI off the event loop that serves the registry."""
    return Result(*await asyncio.to_thread(_cli, *argv))


@pytest.fixture
def hub() -> Iterator[ProviderFixture]:
    state = FixtureState()
    state.add_hf("org/model", SHA, FILES)
    with provider_fixture(state) as running:
        yield running


@pytest.fixture
async def server(hub: ProviderFixture, tmp_path: Path) -> AsyncIterator[str]:
    settings = RegistrySettings(port=0, grpc_port=0, cache_dir=tmp_path / "cache")
    providers = builtin_providers(ProviderConfig(env=hub.env(), timeout_s=5.0))
    app = create_app(settings, providers=providers)
    async with serve_in_background(app):
        yield str(app.state.grpc_address)


async def test_health_and_ping(server: str) -> None:
    health = await acli("--server", server, "--output", "json", "health")
    assert health.code == 0, health.err
    assert health.json()["status"] == "ok"
    ping = await acli("--server", server, "ping")
    assert (ping.code, ping.out) == (0, "pong\n")


async def test_server_download_list_validate_clear(server: str, hub: ProviderFixture) -> None:
    down = await acli("--server", server, "--output", "json", "model", "download", "org/model",
                      "--strategy", "ServerOnly")  # fmt: skip
    assert down.code == 0, down.err
    assert down.json()["status"] == "DOWNLOADED"
    listed = await acli("--server", server, "--output", "json", "model", "list-files", "org/model")
    assert listed.code == 0, listed.err
    files = listed.json()["files"]
    assert isinstance(files, list)
    assert {f["path"]: f["size"] for f in files} == {k: len(v) for k, v in FILES.items()}
    valid = await acli("--server", server, "model", "validate", "org/model")
    assert valid.code == 0, valid.err
    assert "OK (2 files" in valid.out
    cleared = await acli("--server", server, "model", "clear", "org/model")
    assert cleared.code == 0, cleared.err
    gone = await acli("--server", server, "model", "list-files", "org/model")
    assert gone.code == 1
    assert gone.err == (
        "error: org/model is not in the registry's cache; "
        f"run 'flexinfer mx --server {server} model download org/model' first\n"
    )


async def test_server_download_error_exits_1(server: str) -> None:
    result = await acli("--server", server, "model", "download", "org/missing",
                        "--strategy", "ServerOnly")  # fmt: skip
    assert result.code == 1
    assert "org/missing" in result.err
    assert result.err.count("\n") == 1


async def test_a_registry_with_a_token_needs_it_on_every_command(
    hub: ProviderFixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = RegistrySettings(
        port=0,
        grpc_port=0,
        cache_dir=tmp_path / "cache",
        auth_token="s3cret",  # type: ignore[arg-type]
    )
    providers = builtin_providers(ProviderConfig(env=hub.env(), timeout_s=5.0))
    app = create_app(settings, providers=providers)
    async with serve_in_background(app):
        server = str(app.state.grpc_address)
        denied = await acli("--server", server, "ping")
        assert (denied.code, denied.err.split(":")[1].strip()) == (1, "UNAUTHENTICATED")
        wrong = await acli("--server", server, "--token", "nope", "model", "list-files", "x")
        assert wrong.code == 1
        assert "UNAUTHENTICATED" in wrong.err
        download = ("model", "download", "org/model", "--strategy", "ServerOnly")
        flagged = await acli("--server", server, "--token", "s3cret", *download)
        assert flagged.code == 0, flagged.err
        monkeypatch.setenv("FLEXINFER_REGISTRY_AUTH_TOKEN", "s3cret")
        for argv in (
            ("ping",),
            ("model", "list-files", "org/model"),
            ("model", "validate", "org/model"),
        ):
            result = await acli("--server", server, *argv)
            assert result.code == 0, (argv, result.err)
