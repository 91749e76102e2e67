"""Finding the model: X-Model-ID > /model/<name>/ > JSON body > multipart; bodies stream."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from flexinfer_proxy.core.errors import BadRequestError
from flexinfer_proxy.core.extract import (
    check_model_name,
    multipart_model,
    scan_json_prefix,
    splice_model,
)
from flexinfer_proxy.core.target import parse_target
from flexinfer_proxy.testing import make_model
from flexinfer_proxy.testing_stack import proxy_stack, upstreams

JSON = {"content-type": "application/json"}


def test_scan_finds_model_in_a_prefix_and_splices_it() -> None:
    body = b'{"stream": true, "model": "caf\xc3\xa9", "messages": [{"role": "user", "content": "'
    scanned = scan_json_prefix(body)
    assert scanned.model == "café"
    assert scanned.data["stream"] is True
    assert not scanned.complete
    assert scanned.span is not None
    spliced = splice_model(body, scanned.span, "backend")
    assert spliced.startswith(b'{"stream": true, "model": "backend", "messages"')


def test_scan_reports_cut_members_as_absent() -> None:
    assert scan_json_prefix(b'{"messages": [1, 2').model is None
    assert scan_json_prefix(b'{"max_tokens": 12').data == {}  # may continue: 123
    with pytest.raises(BadRequestError):
        scan_json_prefix(b"[1, 2")
    with pytest.raises(BadRequestError):
        scan_json_prefix(b'{"model" 1, "x": 2}')
    with pytest.raises(BadRequestError):
        scan_json_prefix(b'{"model": 5, "x": 2}')


def test_multipart_model_field() -> None:
    ct = b"multipart/form-data; boundary=XyZ"
    body = (
        b'--XyZ\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\n'
        b'RIFF....\r\n--XyZ\r\nContent-Disposition: form-data; name="model"\r\n\r\n'
        b"whisper\r\n--XyZ--\r\n"
    )
    assert multipart_model(ct, body) == "whisper"
    assert multipart_model(ct, body[:-30]) is None  # cut before the value ends
    with pytest.raises(BadRequestError):
        multipart_model(b"multipart/form-data", body)


def test_model_names_and_paths() -> None:
    prefixed = parse_target(b"/model/tiny/v1/chat/completions?x=1")
    assert (prefixed.model, prefixed.route) == ("tiny", "/v1/chat/completions")
    assert prefixed.forward == b"/v1/chat/completions?x=1"
    assert parse_target(b"/v1/chat/completions").model is None
    for bad in ("", "../etc", "a/../b", "/abs", "a\x00b", "a\nb", "x" * 300, "a\\b", "\ud800"):
        with pytest.raises(BadRequestError):
            check_model_name(bad, "t")


async def test_cascade_over_http(tmp_path: Path) -> None:
    async with (
        upstreams(1) as ups,
        proxy_stack(
            tmp_path,
            [
                make_model("tiny", served_name="backend-tiny", aliases=["tiny"], backend="vllm"),
                make_model("other"),
            ],
            parse_cap_bytes=4096,
        ) as stack,
    ):
        fake, url = ups[0]
        await stack.set_endpoints("default/tiny", [url])
        async with httpx.AsyncClient() as client:
            # 1. X-Model-ID wins over the body (whose model is rewritten to the backend's).
            reply = await client.post(
                f"{stack.url}/v1/chat/completions",
                json={"model": "other", "messages": []},
                headers={"X-Model-ID": "tiny"},
            )
            assert reply.status_code == 200
            assert fake.seen[-1].json()["model"] == "backend-tiny"
            # 2. /model/<name>/ is stripped before forwarding.
            reply = await client.post(
                f"{stack.url}/model/tiny/v1/chat/completions?x=1", json={"messages": []}
            )
            assert reply.status_code == 200
            assert fake.seen[-1].path == "/v1/chat/completions"
            # The body named no model: the engine still gets its served name.
            assert fake.seen[-1].json()["model"] == "backend-tiny"
            reply = await client.post(
                f"{stack.url}/v1/chat/completions",
                json={"messages": []},
                headers={"X-Model-ID": "tiny"},
            )
            assert fake.seen[-1].json() == {"messages": [], "model": "backend-tiny"}
            # 3. JSON body model.
            reply = await client.post(
                f"{stack.url}/v1/completions", json={"model": "backend-tiny", "prompt": "x"}
            )
            assert reply.status_code == 200
            # 4. multipart: forwarded byte for byte.
            files = {"file": ("a.wav", b"RIFF\x00\x01binary", "audio/wav")}
            reply = await client.post(
                f"{stack.url}/v1/audio/transcriptions", data={"model": "tiny"}, files=files
            )
            seen = fake.seen[-1]
            assert seen.path == "/v1/audio/transcriptions"
            assert b"RIFF\x00\x01binary" in seen.body
            assert b"backend-tiny" not in seen.body
            assert seen.headers["content-type"].startswith("multipart/form-data; boundary=")
            assert reply.status_code == 400  # the fake answers JSON only; the body was intact


async def test_large_body_streams_through_with_model_spliced(tmp_path: Path) -> None:
    async with (
        upstreams(1) as ups,
        proxy_stack(
            tmp_path,
            [make_model("tiny", served_name="backend-tiny", aliases=["alias"])],
            parse_cap_bytes=4096,
        ) as stack,
    ):
        fake, url = ups[0]
        await stack.set_endpoints("default/tiny", [url])
        big = "x" * 200_000
        raw = json.dumps({"model": "alias", "messages": [{"role": "user", "content": big}]})

        async def chunks() -> AsyncIterator[bytes]:
            data = raw.encode()
            for i in range(0, len(data), 8192):
                yield data[i : i + 8192]

        async with httpx.AsyncClient() as client:
            reply = await client.post(
                f"{stack.url}/v1/chat/completions", content=chunks(), headers=JSON
            )
        assert reply.status_code == 200, reply.text
        sent = fake.seen[-1].json()
        assert sent["model"] == "backend-tiny"
        assert sent["messages"][0]["content"] == big


async def test_model_beyond_the_parse_cap_is_a_400(tmp_path: Path) -> None:
    async with proxy_stack(tmp_path, [make_model("tiny")], parse_cap_bytes=1024) as stack:
        raw = json.dumps({"messages": ["y" * 50_000], "model": "tiny"}).encode()

        async def slowly() -> AsyncIterator[bytes]:
            for i in range(0, len(raw), 4096):
                yield raw[i : i + 4096]
                await asyncio.sleep(0.002)  # separate receive() messages on the proxy

        async with httpx.AsyncClient(timeout=5) as client:
            reply = await client.post(
                f"{stack.url}/v1/chat/completions", content=slowly(), headers=JSON
            )
        assert reply.status_code == 400
        assert "first 1024 bytes" in reply.json()["error"]["message"]


async def test_a_large_body_without_a_model_gets_one_inserted(tmp_path: Path) -> None:
    async with (
        upstreams(1) as ups,
        proxy_stack(
            tmp_path,
            [make_model("tiny", served_name="backend-tiny", aliases=["tiny"])],
            parse_cap_bytes=4096,
        ) as stack,
    ):
        fake, url = ups[0]
        await stack.set_endpoints("default/tiny", [url])
        big = "x" * 100_000
        raw = json.dumps({"messages": [{"role": "user", "content": big}]}).encode()

        async def chunks() -> AsyncIterator[bytes]:
            for i in range(0, len(raw), 8192):
                yield raw[i : i + 8192]

        async with httpx.AsyncClient() as client:
            reply = await client.post(
                f"{stack.url}/model/tiny/v1/chat/completions", content=chunks(), headers=JSON
            )
        assert reply.status_code == 200, reply.text
        sent = fake.seen[-1].json()
        assert sent["model"] == "backend-tiny"
        assert sent["messages"][0]["content"] == big
