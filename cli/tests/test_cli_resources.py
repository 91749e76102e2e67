"""apply/get/describe/delete/scale/logs against a real controller's admin API (subprocess CLI)."""

from __future__ import annotations

import asyncio
import json
import secrets
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from flexinfer_controller.runtime.local import LocalRuntime
from flexinfer_controller.testing import (
    Harness,
    eventually,
    fake_model_dir,
    kill_engines,
    model_doc,
    run_controller,
)
from flexinfer_testing.cli import cli_env, expect_error, flexinfer

TOKEN = "ctl-" + secrets.token_hex(20)


@pytest.fixture(autouse=True)
def no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    assert kill_engines(tmp_path) == [], "a test left engines running"


@pytest.fixture
async def h(tmp_path: Path) -> AsyncIterator[Harness]:
    async with run_controller(tmp_path) as harness:
        yield harness


def _doc(tmp_path: Path, name: str, **serverless: Any) -> dict[str, Any]:
    return model_doc(name, fake_model_dir(tmp_path / name).as_uri(), **serverless)


def _write(path: Path, *docs: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump_all(docs))
    return path


async def test_apply_get_describe_delete(h: Harness, tmp_path: Path) -> None:
    s = ("--server", h.url)
    adapter = {
        "apiVersion": "ai.flexinfer/v1alpha2",
        "kind": "LoRAAdapter",
        "metadata": {"name": "a-sql"},
        "spec": {
            "modelRef": "a",
            "adapterName": "a-sql",
            "source": {"type": "LocalPath", "uri": "/adapters/sql"},
        },
    }
    manifest = _write(tmp_path / "m.yaml", _doc(tmp_path, "a"), _doc(tmp_path, "b"), adapter)
    applied = await flexinfer("apply", "-f", str(manifest), *s)
    assert applied.code == 0, applied.report()
    assert applied.out.splitlines() == [
        "model.ai.flexinfer/a created",
        "model.ai.flexinfer/b created",
        "loraadapter.ai.flexinfer/a-sql created",
    ]
    again = await flexinfer("apply", "-f", str(manifest), *s)
    assert again.out.splitlines()[0] == "model.ai.flexinfer/a unchanged", again.report()
    changed = _doc(tmp_path, "a", minReplicas=0, maxReplicas=2)
    relabelled = _doc(tmp_path, "b")
    relabelled["metadata"]["labels"] = {"team": "ml"}
    stdin = json.dumps(changed) + "\n"
    assert (await flexinfer("apply", "-f", "-", *s, stdin=stdin)).out == (
        "model.ai.flexinfer/a configured\n"
    )
    second = _write(tmp_path / "b.yaml", relabelled)
    assert "configured" in (await flexinfer("apply", "-f", str(second), *s)).out

    table = await flexinfer("get", "models", *s)
    assert table.code == 0, table.report()
    header, *rows = table.out.splitlines()
    assert header.split() == ["NAME", "BACKEND", "PHASE", "READY", "RESIDENCY", "GPU", "TPS", "AGE"]
    assert [r.split()[:2] for r in rows] == [["a", "reference"], ["b", "reference"]]
    one = await flexinfer("get", "model", "a", "-o", "json", *s)
    assert json.loads(one.out)["spec"]["serverless"]["maxReplicas"] == 2
    adapters = await flexinfer("get", "lora", *s)
    assert adapters.out.split()[:6] == ["NAME", "MODEL", "ADAPTER", "PHASE", "LOADED", "a-sql"]
    described = await flexinfer("describe", "model", "b", *s)
    assert "Labels:       team=ml" in described.out
    assert "Spec:" in described.out
    assert "Conditions:" in described.out

    gone = await flexinfer("delete", "model", "b", *s)
    assert gone.out == "model.ai.flexinfer/b deleted\n", gone.report()
    by_file = await flexinfer("delete", "-f", str(manifest), "--ignore-not-found", *s)
    assert by_file.code == 0, by_file.report()
    assert by_file.out.splitlines() == [
        "model.ai.flexinfer/a deleted",
        "loraadapter.ai.flexinfer/a-sql deleted",
    ]
    empty = await flexinfer("get", "models", *s)
    assert (empty.code, empty.out) == (0, "")
    assert "No models found" in empty.err


async def test_yaml_output_reapplies_unchanged(h: Harness, tmp_path: Path) -> None:
    s = ("--server", h.url)
    await flexinfer("apply", "-f", str(_write(tmp_path / "m.yaml", _doc(tmp_path, "a"))), *s)
    await flexinfer("apply", "-f", str(_write(tmp_path / "n.yaml", _doc(tmp_path, "b"))), *s)
    one = await flexinfer("get", "model", "a", "-o", "yaml", *s)
    assert yaml.safe_load(one.out)["kind"] == "Model"
    listing = await flexinfer("get", "models", "-o", "yaml", *s)
    assert [i["metadata"]["name"] for i in yaml.safe_load(listing.out)["items"]] == ["a", "b"]
    for text in (one.out, listing.out):
        again = await flexinfer("apply", "-f", "-", *s, stdin=text)
        assert again.code == 0, again.report()
        assert set(again.out.split()) <= {"model.ai.flexinfer/a", "model.ai.flexinfer/b",
                                          "unchanged"}, again.out  # fmt: skip
    as_json = await flexinfer("get", "models", "-o", "json", *s)
    assert (await flexinfer("apply", "-f", "-", *s, stdin=as_json.out)).out.count("unchanged") == 2


async def test_scale_pins_and_releases_replicas(h: Harness, tmp_path: Path) -> None:
    s = ("--server", h.url)
    doc = _doc(tmp_path, "a", idle_timeout="7m")
    doc["metadata"]["labels"] = {"keep": "me"}
    await flexinfer("apply", "-f", str(_write(tmp_path / "m.yaml", doc)), *s)
    up = await flexinfer("scale", "model", "a", "--replicas", "2", *s)
    assert up.out == "model.ai.flexinfer/a scaled\n", up.report()
    await h.wait_phase("a", "Ready", timeout_s=20)

    # Ready comes with the first ready replica; the second may still be loading.
    async def both_ready() -> bool:
        return (await h.store.get_model("default", "a")).status.ready_replicas == 2

    await eventually(both_ready, timeout_s=30)
    model = await h.store.get_model("default", "a")
    assert model.spec.serverless_or_default.min_replicas == 2
    assert model.metadata.labels == {"keep": "me"}
    assert model.spec.serverless_or_default.idle_timeout.total_seconds() == 420
    down = await flexinfer("scale", "model", "a", "--replicas", "0", *s)
    assert down.code == 0, down.report()
    model = await h.store.get_model("default", "a")
    serverless = model.spec.serverless_or_default
    assert (serverless.min_replicas, serverless.max_replicas, serverless.scale_to_zero) == (
        0,
        2,
        True,
    )
    for bad in ("11", "-1", "two"):
        refused = await flexinfer("scale", "model", "a", "--replicas", bad, *s)
        assert refused.code == 2, refused.report()
    not_a_model = await flexinfer("scale", "lora", "x", "--replicas", "1", *s)
    assert (not_a_model.code, not_a_model.err.count("\n")) == (2, 1)
    await flexinfer("delete", "model", "a", *s)


async def test_logs_and_follow(h: Harness, tmp_path: Path) -> None:
    s = ("--server", h.url)
    await flexinfer(
        "apply", "-f", str(_write(tmp_path / "m.yaml", _doc(tmp_path, "a", minReplicas=1))), *s
    )
    await h.wait_phase("a", "Ready", timeout_s=20)
    runtime = h.app.state.controller.runtime
    assert isinstance(runtime, LocalRuntime)
    (replica,) = runtime.list("default/a")
    shown = await flexinfer("logs", "model", "a", *s)
    assert shown.code == 0, shown.report()
    assert "fake engine serving" in shown.out
    assert (await flexinfer("logs", "model", "a", "--tail", "0", *s)).out == ""

    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "flexinfer_cli", "logs", "model", "a", "-f", *s,
        stdout=asyncio.subprocess.PIPE, env=cli_env(),
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(30):
            assert b"fake engine serving" in await proc.stdout.readline()
            with runtime.log_path(replica.id).open("a") as out:
                out.write("a line written after the follow began\n")
            assert await proc.stdout.readline() == b"a line written after the follow began\n"
            # The replica goes: the follow ends by itself, and exits 0.
            await flexinfer("delete", "model", "a", *s)
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_errors_are_one_line_with_documented_codes(h: Harness, tmp_path: Path) -> None:
    s = ("--server", h.url)
    missing = await flexinfer("get", "model", "nope", *s)
    assert (missing.code, missing.out) == (1, "")
    assert missing.err.count("\n") == 1
    assert "404" in missing.err
    assert "nope" in missing.err
    assert (await flexinfer("logs", "model", "nope", *s)).code == 1
    assert (await flexinfer("delete", "model", "nope", *s)).code == 1
    assert (await flexinfer("describe", "model", "nope", *s)).code == 1

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_doc(tmp_path, "ok")) + "---\nkind: Model\nmetadata: {name: x\n")
    parsed = await flexinfer("apply", "-f", str(bad), *s)
    assert parsed.code == 2, parsed.report()
    assert parsed.err.startswith(f"flexinfer apply: {bad}:")
    assert parsed.err.count("\n") == 1
    assert "line" in parsed.err or f"{bad}:2" in parsed.err or ":" in parsed.err

    foreign = {"apiVersion": "ai.flexinfer/v1alpha2", "kind": "Gadget", "metadata": {"name": "g"}}
    mixed = _write(tmp_path / "mixed.yaml", _doc(tmp_path, "first"), foreign)
    unknown = await flexinfer("apply", "-f", str(mixed), *s)
    assert unknown.code == 2
    assert "'Gadget'" in unknown.err
    assert unknown.err.count("\n") == 1
    invalid = _doc(tmp_path, "second")
    invalid["spec"]["serverless"]["maxReplicas"] = 99
    refused = await flexinfer(
        "apply", "-f", "-", *s, stdin=yaml.safe_dump_all([_doc(tmp_path, "first"), invalid])
    )
    expect_error(
        refused, 2, "maxReplicas"
    )  # Nothing of either file was applied: every document is checked first.
    assert (await flexinfer("get", "models", *s)).out == ""

    unreadable = await flexinfer("apply", "-f", str(tmp_path / "absent.yaml"), *s)
    assert unreadable.code == 2
    assert "cannot read" in unreadable.err
    assert (await flexinfer("get", "gizmos", *s)).code == 2
    unreachable = await flexinfer("get", "models", "--server", "http://127.0.0.1:9")
    assert unreachable.code == 2
    assert unreachable.err.count("\n") == 1
    assert "cannot reach" in unreachable.err


async def test_token_from_flag_env_or_data_dir(tmp_path: Path) -> None:
    async with run_controller(tmp_path, auth_token=TOKEN) as h:
        refused = await flexinfer("get", "models", "--server", h.url)
        assert refused.code == 1
        assert refused.err.count("\n") == 1
        assert "401" in refused.err
        assert (await flexinfer("get", "models", "--server", h.url, "--token", TOKEN)).code == 0
        env = cli_env(FLEXINFER_SERVER=h.url, FLEXINFER_ADMIN_TOKEN=TOKEN)
        assert (await flexinfer("get", "models", env=env)).code == 0
        # The running stack's data dir: its endpoints.json and admin-token.
        data = tmp_path / "stack"
        data.mkdir()
        (data / "endpoints.json").write_text(json.dumps({"controller": h.url}))
        (data / "admin-token").write_text(TOKEN + "\n")
        assert (await flexinfer("get", "models", "--data-dir", str(data))).code == 0
        found = await flexinfer(
            "get", "models", cwd=tmp_path, env=cli_env(FLEXINFER_DATA_DIR="stack")
        )
        assert found.code == 0, found.report()
        # The data dir's token goes only to the data dir's server.
        other = await flexinfer("get", "models", "--data-dir", str(data), "--server", h.url)
        assert other.code == 1
        assert "401" in other.err
    none = await flexinfer("get", "models", cwd=tmp_path)
    assert none.code == 2
    assert "no server" in none.err
