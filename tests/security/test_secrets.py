"""Proxy tokens: never logged, exported or echoed; scoped to their tenant; compared in
constant time. On both server protocols, black-box over real sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from flexinfer_common.serving import serve_in_background
from flexinfer_proxy.testing import FakeUpstream, make_model
from flexinfer_proxy.testing_stack import ProxyStack
from flexinfer_testing.http_reference import AnswerReader
from flexinfer_testing.proxy_servers import SERVERS, Server, served_proxy

TENANT = "flexinfer.ai/tenant"
MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
GOOD_FORWARDED = 7
"""Requests ``_good_requests`` makes that reach the engine (model listings do not)."""
CLIENT_LOGGERS = ("httpx", "httpcore", "openai")
"""The test's own clients log in this process too; the proxy's logs are all the others."""


def _token() -> str:
    return f"sk-flexinfer-{secrets.token_hex(16)}"


@dataclass(frozen=True)
class Tokens:
    """One unscoped token (from auth_tokens) and three scoped grants (from the token file)."""

    admin: str = field(default_factory=_token)
    team_a: str = field(default_factory=_token)
    team_b: str = field(default_factory=_token)
    shared_only: str = field(default_factory=_token)

    def all(self) -> list[str]:
        """Every configured token, the unscoped one first, in the proxy's grant order."""
        return [self.admin, self.team_a, self.team_b, self.shared_only]

    def leaks(self, text: str) -> list[str]:
        """The tokens ``text`` shows, whole or by their random part."""
        return [t for t in self.all() if t in text or t.rsplit("-", 1)[1][:16] in text]


@dataclass
class SecretStack:
    """A proxy with auth on, three models of two tenants and a shared one, one engine."""

    stack: ProxyStack
    engine: FakeUpstream
    tokens: Tokens

    def client(self, token: str) -> openai.AsyncOpenAI:
        """The openai SDK with ``token``."""
        return self.stack.openai(token)


@contextlib.asynccontextmanager
async def secret_stack(tmp_path: Path, server: Server) -> AsyncIterator[SecretStack]:
    """alpha (tenant team-a), beta (team-b), shared (no tenant label) behind one engine."""
    tokens = Tokens()
    grants = [
        {"token": tokens.team_a, "name": "team-a", "tenants": ["team-a"]},
        {"token": tokens.team_b, "name": "team-b", "tenants": ["team-b"]},
        {"token": tokens.shared_only, "name": "shared", "models": ["shared"]},
    ]
    token_file = tmp_path / "tokens.json"
    token_file.write_text(json.dumps(grants))
    alpha, beta, shared = make_model("alpha"), make_model("beta"), make_model("shared")
    alpha.metadata.labels[TENANT] = "team-a"
    beta.metadata.labels[TENANT] = "team-b"
    engine = FakeUpstream(name="engine")
    async with (
        serve_in_background(engine) as engine_url,
        served_proxy(
            tmp_path,
            [alpha, beta, shared],
            server,
            auth_tokens=[tokens.admin],
            auth_token_file=token_file,
        ) as stack,
    ):
        for name in ("alpha", "beta", "shared"):
            await stack.set_endpoints(f"default/{name}", [engine_url])
        yield SecretStack(stack, engine, tokens)


async def _raw(url: str, data: bytes) -> str:
    """Send raw bytes; the answer the proxy gives (or '' if it closes)."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(data)
        await writer.drain()
        answer = await AnswerReader(reader).next(5.0)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()
    return "" if answer is None else repr(answer)


async def _bad_requests(s: SecretStack) -> list[str]:
    """Refused requests that carry a token somewhere; every answer, as text."""
    t = s.tokens
    url = s.stack.url
    chat = f"{url}/v1/chat/completions"
    near_miss = t.team_a[:-1] + ("0" if t.team_a[-1] != "0" else "1")
    attempts: list[tuple[str, dict[str, str], object]] = [
        (chat, {"Authorization": f"Bearer {near_miss}"}, {"model": "alpha"}),
        (chat, {"Authorization": f"Bearer {t.team_a}"}, {"model": "beta"}),
        (chat, {"Authorization": f"Bearer {t.team_b}"}, {"model": "alpha", "stream": True}),
        (chat, {"Authorization": f"Basic {t.admin}"}, {"model": "alpha"}),
        (chat, {"Authorization": f"Bearer {t.admin} {t.team_a}"}, {"model": "alpha"}),
        (chat, {"Authorization": "Bearer " + t.admin * 120}, {"model": "alpha"}),
        (chat, {"Authorization": f"Bearer {t.team_a}"}, {"model": "no-such-model"}),
        (chat, {"Authorization": f"Bearer {t.shared_only}"}, {"model": "alpha"}),
    ]
    out = []
    async with httpx.AsyncClient(timeout=10) as http:
        for target, headers, body in attempts:
            reply = await http.post(target, headers=headers, json=body)
            assert reply.status_code in (400, 401, 403, 404), (reply.status_code, reply.text)
            out.append(f"{reply.status_code} {reply.headers} {reply.text}")
        team_a = {"Authorization": f"Bearer {t.team_a}"}
        reply = await http.get(f"{url}/v1/models/beta", headers=team_a)
        out.append(f"{reply.status_code} {reply.headers} {reply.text}")
        reply = await http.post(chat, headers=team_a, content=b'{"model":"\\ud800"}')
        out.append(f"{reply.status_code} {reply.headers} {reply.text}")
    auth = f"authorization: Bearer {t.team_b}\r\n".encode()
    for framing in (b"transfer-encoding: gzip\r\n", b"x-bad: \x01\r\ncontent-length: 2\r\n"):
        head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: proxy\r\n" + auth + framing
        out.append(await _raw(url, head + b"\r\n{}"))
    out.append(await _raw(url, b"POST /v1/chat%0D%0A HTTP/1.1\r\nhost: p\r\n" + auth + b"\r\n"))
    return out


async def _good_requests(s: SecretStack) -> None:
    """Allowed requests with every token, streamed and not, through the openai SDK."""
    t = s.tokens
    for token, model in ((t.team_a, "alpha"), (t.team_b, "beta"), (t.shared_only, "shared")):
        async with s.client(token) as client:
            await client.chat.completions.create(model=model, messages=MESSAGES)
            stream = await client.chat.completions.create(
                model=model,
                messages=MESSAGES,
                stream=True,
            )
            assert [chunk async for chunk in stream]
            assert [m.id async for m in client.models.list()] == [model]
    async with s.client(t.admin) as client:
        await client.completions.create(model="alpha", prompt="hi")


@pytest.mark.parametrize("server", SERVERS)
async def test_tokens_never_appear_in_logs_metrics_or_answers(
    tmp_path: Path, server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    # uvicorn's logger does not propagate to the root, where caplog listens.
    uvicorn_log = logging.getLogger("uvicorn")
    async with secret_stack(tmp_path, server) as s:
        uvicorn_log.addHandler(caplog.handler)
        try:
            await _good_requests(s)
            answers = await _bad_requests(s)
            async with httpx.AsyncClient() as http:
                metrics = await http.get(f"{s.stack.url}/metrics")
        finally:
            uvicorn_log.removeHandler(caplog.handler)
    assert metrics.status_code == 200
    assert "flexinfer" in metrics.text  # the proxy's own series are there
    tokens = s.tokens
    assert len(s.engine.seen) == GOOD_FORWARDED  # every good request reached the engine
    assert not tokens.leaks(metrics.text)
    for answer in answers:
        assert not tokens.leaks(answer), answer
    records = [r for r in caplog.records if not r.name.startswith(CLIENT_LOGGERS)]
    assert records, "the proxy logged nothing: the log check would be vacuous"
    for record in records:
        text = f"{record.getMessage()} {record.args} {record.exc_text or ''}"
        assert not tokens.leaks(text), (record.name, record.getMessage()[:300])


@pytest.mark.parametrize("server", SERVERS)
async def test_the_engine_never_sees_a_proxy_token(tmp_path: Path, server: Server) -> None:
    async with secret_stack(tmp_path, server) as s:
        await _good_requests(s)
    assert len(s.engine.seen) == GOOD_FORWARDED
    for seen in s.engine.seen:
        assert not s.tokens.leaks(json.dumps(seen.headers)), seen.headers


@pytest.mark.parametrize("server", SERVERS)
async def test_a_tenant_token_reaches_and_lists_only_its_tenant(
    tmp_path: Path, server: Server
) -> None:
    async with secret_stack(tmp_path, server) as s:
        t = s.tokens
        listings = {}
        for token in t.all():
            async with s.client(token) as client:
                listings[token] = sorted([m.id async for m in client.models.list()])
        assert listings == {
            t.admin: ["alpha", "beta", "shared"],
            t.team_a: ["alpha"],
            t.team_b: ["beta"],
            t.shared_only: ["shared"],
        }
        forbidden = [(t.team_a, "beta"), (t.team_b, "alpha"), (t.team_a, "shared")]
        forbidden += [(t.shared_only, "alpha")]
        for token, model in forbidden:
            async with s.client(token) as client:
                for stream in (False, True):
                    with pytest.raises(openai.PermissionDeniedError) as info:
                        await client.chat.completions.create(
                            model=model,
                            messages=MESSAGES,
                            stream=stream,
                        )
                    assert info.value.status_code == 403
                with pytest.raises(openai.PermissionDeniedError):
                    await client.models.retrieve(model)
        assert s.engine.seen == []  # nothing forbidden reached the engine
        async with s.client(t.team_a) as client:
            await client.chat.completions.create(model="alpha", messages=MESSAGES)
        assert len(s.engine.seen) == 1


@dataclass
class _CompareSpy:
    """Counts hmac.compare_digest calls and the argument lengths they compared."""

    real: Callable[[bytes, bytes], bool]
    calls: list[tuple[int, int]] = field(default_factory=list)

    def __call__(self, a: bytes, b: bytes) -> bool:
        self.calls.append((len(a), len(b)))
        return self.real(a, b)

    def take(self) -> list[tuple[int, int]]:
        """The calls since the last take."""
        calls, self.calls = self.calls, []
        return calls


@pytest.mark.parametrize("server", SERVERS)
async def test_token_comparisons_do_not_depend_on_the_token(
    tmp_path: Path, server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = _CompareSpy(hmac.compare_digest)
    monkeypatch.setattr(hmac, "compare_digest", spy)
    async with secret_stack(tmp_path, server) as s:
        t = s.tokens
        near_miss = t.shared_only[:-1] + ("0" if t.shared_only[-1] != "0" else "1")
        candidates = {  # (token, a model it may use, or any when it is no token)
            "first grant": (t.admin, "alpha"),
            "middle grant": (t.team_b, "beta"),
            "last grant": (t.shared_only, "shared"),
            "unknown": (_token(), "alpha"),
            "near miss": (near_miss, "shared"),
        }
        counts: dict[str, list[int]] = {}
        async with httpx.AsyncClient(timeout=10) as http:
            for label, (token, model) in candidates.items():
                headers = {"Authorization": f"Bearer {token}"}
                spy.take()
                chat = f"{s.stack.url}/v1/chat/completions"
                await http.post(chat, headers=headers, json={"model": model})
                posted = spy.take()
                await http.get(f"{s.stack.url}/v1/models", headers=headers)
                listed = spy.take()
                assert all(a == b == 32 for a, b in posted + listed), "not SHA-256 digests"
                counts[label] = [len(posted), len(listed)]
    grants = len(t.all())
    assert counts == {label: [grants, grants] for label in candidates}, counts
