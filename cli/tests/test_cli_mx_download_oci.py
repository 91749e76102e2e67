"""``flexinfer mx model download oci://…``: a generated model pushed to a real in-process OCI
registry, fetched by a real registry, copied out by the CLI, equal byte for byte."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

from flexinfer_common.serving import serve_in_background
from flexinfer_common.testing.oci_push import ModelPusher
from flexinfer_common.testing.oci_registry import TestRegistry, serve_registry
from flexinfer_engine.core.weights import generate_model
from flexinfer_registry.app import create_app
from flexinfer_registry.client.mx_cli import run
from flexinfer_registry.client.mx_output import Output
from flexinfer_registry.settings import RegistrySettings


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(argv, Output(stdout=out, stderr=err))
    return code, out.getvalue(), err.getvalue()


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


async def test_download_an_oci_model_through_the_registry(tmp_path: Path) -> None:
    model = generate_model(tmp_path / "models" / "tiny", name="tiny", preset="tiny")
    files = {p.name: p.read_bytes() for p in sorted(model.iterdir()) if p.is_file()}
    oci = TestRegistry(auth="bearer", users={"ci": "push-secret"}, anonymous_pull=True)
    async with serve_registry(oci) as url:
        await ModelPusher(url, "ci", "push-secret").push_model("org/tiny", "v1", files)
        host = url.removeprefix("http://")
        settings = RegistrySettings(port=0, grpc_port=0, cache_dir=tmp_path / "registry",
                                    oci_insecure_registries=[host])  # fmt: skip
        app: Any = create_app(settings)
        async with serve_in_background(app):
            name = f"oci://{host}/org/tiny:v1"
            argv = ["--server", str(app.state.grpc_address), "--output", "json", "model",
                    "download", name, "--strategy", "ServerOnly",
                    "--cache-dir", str(tmp_path / "local")]  # fmt: skip
            code, out, err = await asyncio.to_thread(_cli, argv)
            assert code == 0, err
            result = json.loads(out)
            assert result["status"] == "DOWNLOADED"
            manifest = oci.tags["org/tiny"]["v1"]
            assert result["resolved_revision"] == manifest.removeprefix("sha256:")[:40]
            copied = Path(result["path"])
            assert copied == tmp_path / "local" / "oci" / "127.0.0.1" / host.split(":")[1] / (
                "org/tiny/v1"
            )
            assert {k: v for k, v in _files(copied).items() if not k.startswith(".")} == files

            # --provider oci makes a bare host/repo:tag an oci:// name.
            bare = ["--server", str(app.state.grpc_address), "model", "list-files",
                    f"{host}/org/tiny:v1", "--provider", "oci"]  # fmt: skip
            code, out, err = await asyncio.to_thread(_cli, bare)
            assert code == 0, err
            assert "model.safetensors" in out
    # Anonymous pulls: a token without credentials, for the pull scope only.
    assert [r["user"] for r in oci.token_requests if r["scopes"][0].endswith(":pull")] == [None]
