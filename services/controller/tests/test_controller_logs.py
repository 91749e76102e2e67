"""GET /v1/admin/models/{name}/logs: a replica's captured output, its tail, and following it."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from flexinfer_common.errors import NotFoundError
from flexinfer_controller.api.logs import REPLICA_HEADER
from flexinfer_controller.runtime.local import LocalRuntime
from flexinfer_controller.runtime.logfile import open_log, seek_tail
from flexinfer_controller.testing import (
    Harness,
    error_of,
    fake_model_dir,
    kill_engines,
    model_doc,
    run_controller,
)

TOKEN = "ctl-" + secrets.token_hex(20)


@pytest.fixture(autouse=True)
def no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    assert kill_engines(tmp_path) == [], "a test left engines running"


def _runtime(h: Harness) -> LocalRuntime:
    runtime = h.app.state.controller.runtime
    assert isinstance(runtime, LocalRuntime)
    return runtime


async def _ready_replica(h: Harness, tmp_path: Path, name: str = "tiny") -> str:
    """Declare ``name`` with one warm replica; its replica id once it is Ready."""
    source = fake_model_dir(tmp_path / name).as_uri()
    await h.put_model(model_doc(name, source, minReplicas=1))
    await h.wait_phase(name, "Ready")
    (replica,) = _runtime(h).list(f"default/{name}")
    return replica.id


async def test_logs_show_the_replica_output_and_its_tail(tmp_path: Path) -> None:
    async with run_controller(tmp_path) as h:
        rid = await _ready_replica(h, tmp_path)
        path = _runtime(h).log_path(rid)
        with path.open("a") as out:
            out.write("second line\nthird line\n")
        got = await h.client.get("/v1/admin/models/tiny/logs")
        assert got.status_code == 200, got.text
        assert got.headers[REPLICA_HEADER] == rid
        assert got.headers["content-type"].startswith("text/plain")
        assert got.text == path.read_text()
        assert "fake engine serving" in got.text
        tail = await h.client.get("/v1/admin/models/tiny/logs", params={"tailLines": 2})
        assert tail.text == "second line\nthird line\n"
        named = await h.client.get(f"/v1/admin/models/tiny/logs?replica={rid}&tailLines=0")
        assert (named.status_code, named.text) == (200, "")


async def test_follow_streams_appended_output_and_ends_with_the_replica(tmp_path: Path) -> None:
    async with run_controller(tmp_path) as h:
        rid = await _ready_replica(h, tmp_path)
        path = _runtime(h).log_path(rid)
        seen = ""
        async with (
            asyncio.timeout(20),
            h.client.stream(
                "GET", "/v1/admin/models/tiny/logs", params={"follow": "true"}
            ) as response,
        ):
            assert response.status_code == 200
            chunks = response.aiter_text()
            while "fake engine serving" not in seen:
                seen += await anext(chunks)
            with path.open("a") as out:
                out.write("appended after the follow began\n")
            while "appended after the follow began" not in seen:
                seen += await anext(chunks)
            # The replica goes (the Model is deleted): the stream ends by itself.
            deleted = await h.client.delete("/v1/admin/models/tiny")
            assert deleted.status_code == 204
            async for rest in chunks:
                seen += rest
        # Reaching here within the timeout is the point: the follow ended with its replica.
        assert seen.startswith(path.read_text()[: len("fake engine")])


async def test_an_exited_replica_keeps_its_log(tmp_path: Path) -> None:
    async with run_controller(tmp_path) as h:
        source = fake_model_dir(tmp_path / "crashy", mode="crash").as_uri()
        await h.put_model(model_doc("crashy", source, minReplicas=1))
        await h.wait_phase("crashy", "Failed", timeout_s=20)
        got = await h.client.get("/v1/admin/models/crashy/logs?follow=true")
        assert got.status_code == 200, got.text
        assert "crashing on purpose" in got.text


async def test_refusals(tmp_path: Path) -> None:
    async with run_controller(tmp_path) as h:
        missing = await h.client.get("/v1/admin/models/nope/logs")
        assert missing.status_code == 404
        assert "nope" in str(error_of(missing.text)["message"])
        await h.put_model(model_doc("idle", fake_model_dir(tmp_path / "idle").as_uri()))
        idle = await h.client.get("/v1/admin/models/idle/logs")
        assert idle.status_code == 404
        assert "no replica" in str(error_of(idle.text)["message"])
        for replica in ("../../etc/passwd", "..", "a/b", "%2e%2e"):
            bad = await h.client.get("/v1/admin/models/idle/logs", params={"replica": replica})
            assert bad.status_code in (400, 404), (replica, bad.text)
        unknown = await h.client.get("/v1/admin/models/idle/logs", params={"replica": "x-1"})
        assert unknown.status_code == 404
        negative = await h.client.get("/v1/admin/models/idle/logs", params={"tailLines": -1})
        assert negative.status_code == 400


async def test_logs_need_the_admin_token(tmp_path: Path) -> None:
    async with run_controller(tmp_path, auth_token=TOKEN) as h:
        refused = await h.client.get("/v1/admin/models/tiny/logs")
        assert refused.status_code == 401
        assert error_of(refused.text)["type"] == "authentication_error"


@pytest.mark.parametrize(
    ("text", "lines", "expected"),
    [
        (b"a\nb\nc\n", 2, b"b\nc\n"),
        (b"a\nb\nc", 2, b"b\nc"),
        (b"a\nb\nc\n", 9, b"a\nb\nc\n"),
        (b"a\nb\nc\n", 0, b""),
        (b"", 3, b""),
        (b"x" * 20000 + b"\n" + b"y" * 9000 + b"\n", 1, b"y" * 9000 + b"\n"),
    ],
)
def test_seek_tail(tmp_path: Path, text: bytes, lines: int, expected: bytes) -> None:
    path = tmp_path / "log"
    path.write_bytes(text)
    with open_log(path, "test") as fh:
        seek_tail(fh, lines)
        assert fh.read() == expected


def test_open_log_refuses_a_link(tmp_path: Path) -> None:
    (tmp_path / "real").write_text("secret")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(NotFoundError, match="no log for"):
        open_log(tmp_path / "link", "link")
