"""Network faults between the FlexInfer proxy and an engine, through a TCP fault proxy.

A reference engine runs on its own; a FaultProxy in front of it gives each external Model
(``spec.endpoints`` = that fault proxy's URL) one fault: pass, delay, reset, blackhole, cut
or stall the answer. Two more endpoints need no fault proxy: a port nothing listens on
(dead) and a listener whose accept queue is full (connects hang in SYN). The proxy runs in
the distributed stack with its timeouts set small and distinct (connect 1 s, read 3 s,
body 1.5 s), so the test can tell which one fired; active health checks are pushed out of
the way (an hour apart), since they would race the requests being measured.

Measuring time is the point here: each timeout must fire at its setting, no sooner, and
well before twice the setting plus a few seconds (generous for a busy 2-core machine).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest

from flexinfer_testing import faultlog
from flexinfer_testing import faultproxy as fp
from flexinfer_testing.clients import Call, tally
from flexinfer_testing.engines import reference_engine
from flexinfer_testing.ports import free_port, unaccepting_listener
from flexinfer_testing.stack import Stack, stack_factory

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(120)]

CONNECT_S = 1.0
READ_S = 3.0
BODY_S = 1.5

EVENT_END = b"\n\n\r\n"
"""End of one SSE event in the engine's chunked answer (one event per chunk)."""

FAULTS: dict[str, fp.Fault] = {
    "pass": fp.PASS,
    "slow": fp.delay(0.2),
    "late": fp.delay(READ_S + 1.0),
    "reset": fp.RESET,
    "blackhole": fp.BLACKHOLE,
    "cut-between-events": fp.cut_after(0, marker=EVENT_END, occurrence=4),
    "cut-inside-an-event": fp.cut_after(12, marker=b"data: ", occurrence=4),
    "stall": fp.stall_after(0, marker=EVENT_END, occurrence=4),
}


# A client stamps a chunk when it arrives, a little after the proxy read it and armed its
# timer, so an interval the client measures may fall short of the setting by that relay time.
RELAY_SLACK_S = 0.1


def within(seconds: float, setting: float) -> bool:
    """At least the setting (less the relay time), and well before twice it plus a few seconds."""
    return setting - RELAY_SLACK_S <= seconds < 2 * setting + 3


@dataclass
class Upstreams:
    """The stack, and the fault proxy behind each model (``f-<fault>``)."""

    stack: Stack
    proxies: dict[str, fp.FaultProxy]

    def call(
        self, fault: str, *, stream: bool = False, max_tokens: int = 2, timeout_s: float = 0
    ) -> Call:
        """A chat completion for the model whose endpoint has ``fault``; by default the
        client waits longer than any proxy timeout could take."""
        timeout_s = timeout_s or 2 * max(CONNECT_S, READ_S) + 5
        model = f"f-{fault}"
        return Call(self.stack.base_url, model, stream, max_tokens, timeout_s).run()


@pytest.fixture(scope="module")
def upstreams(
    tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path
) -> Iterator[Upstreams]:
    """The engine, a fault proxy per fault, the stack, and a Model per fault."""
    root = tmp_path_factory.mktemp("upstream-faults")
    with ExitStack() as stack_of:
        engine = stack_of.enter_context(reference_engine(tiny_model_dir, root / "engine.log"))
        # Its first generation pays torch's warm-up, which may outlast the 2 s read timeout.
        first = Call(f"{engine.url}/v1", "tiny", max_tokens=1, timeout_s=60).run()
        assert first.outcome == "200", repr(first.error)
        target = ("127.0.0.1", int(engine.url.rsplit(":", 1)[1]))
        proxies = {
            name: stack_of.enter_context(fp.fault_proxy(target, fault, keep_bytes=True))
            for name, fault in FAULTS.items()
        }
        urls = {name: proxy.url for name, proxy in proxies.items()}
        urls["dead"] = f"http://127.0.0.1:{free_port()}"
        urls["syn-hang"] = f"http://127.0.0.1:{stack_of.enter_context(unaccepting_listener())}"
        factory = stack_of.enter_context(stack_factory("distributed", root, tiny_model_dir))
        stack = factory.start(
            FLEXINFER_PROXY_CONNECT_TIMEOUT_S=str(CONNECT_S),
            FLEXINFER_PROXY_READ_TIMEOUT_S=str(READ_S),
            FLEXINFER_PROXY_BODY_TIMEOUT_S=str(BODY_S),
            FLEXINFER_PROXY_HEALTH_INTERVAL_S="3600",
        )
        endpoints = {name: [url] for name, url in urls.items()}
        # Two endpoints, the broken one first: round robin tries it first, then fails over.
        endpoints["failover-from-dead"] = [urls["dead"], urls["pass"]]
        endpoints["failover-from-syn-hang"] = [urls["syn-hang"], urls["pass"]]
        for name, these in endpoints.items():
            stack.apply(f"f-{name}", external_spec(name, these))
        rss_before = faultlog.rss_mib(stack.procs["proxy"].pid)
        ready = Upstreams(stack, proxies)
        warm = ready.call("pass", stream=True)  # the proxy has the models, reaches the engine
        assert warm.outcome == "200", repr(warm.error)
        yield ready
        faultlog.record(
            "(upstream fault module: proxy RSS)", "-", None,
            rss_mib=f"{rss_before}/{faultlog.rss_mib(stack.procs['proxy'].pid)}",
        )  # fmt: skip


def external_spec(fault: str, endpoints: list[str]) -> dict[str, object]:
    """An external Model served at ``endpoints`` (in order), asked for as ``f-<fault>``:
    the engine serves ``tiny``, which the proxy names upstream (the served name) whatever
    alias came in."""
    return {
        "backend": "vllm",
        "source": "hf://flexinfer/tiny",
        "endpoints": endpoints,
        "litellm": {"servedModelName": "tiny", "aliases": [f"f-{fault}"]},
    }


def test_a_slow_upstream_within_the_read_timeout_is_served(upstreams: Upstreams) -> None:
    """Injected: 0.2 s of delay on every chunk between proxy and engine (well under the
    3 s read timeout). Asserted: a plain and a streaming request both get 200 and text."""
    calls = [upstreams.call("slow"), upstreams.call("slow", stream=True, max_tokens=16)]
    faultlog.record("upstream: 0.2 s delay per chunk", tally(calls), None)
    assert [c.outcome for c in calls] == ["200", "200"], [repr(c.error) for c in calls]
    assert all(c.text for c in calls)


def test_a_reset_upstream_is_502_at_once(upstreams: Upstreams) -> None:
    """Injected: the engine side resets the connection (RST) on the request's first byte.
    Asserted: 502, well within the connect timeout."""
    call = upstreams.call("reset")
    faultlog.record("upstream: RST on the first byte", tally([call]), call.seconds)
    assert call.outcome == "502", repr(call.error)
    assert call.seconds < CONNECT_S + 2
    assert upstreams.proxies["reset"].connections()[-1].outcome == "reset"


def test_a_silent_upstream_is_502_at_the_read_timeout(upstreams: Upstreams) -> None:
    """Injected: the connection is accepted and the request read, but nothing is ever
    answered (blackhole). Asserted: 502 once the 3 s read timeout has passed."""
    call = upstreams.call("blackhole")
    faultlog.record("upstream: blackhole (accepts, never answers)", tally([call]), call.seconds)
    assert call.outcome == "502", repr(call.error)
    assert within(call.seconds, READ_S), call.seconds
    assert upstreams.proxies["blackhole"].connections()[-1].up_bytes > 0


def test_an_upstream_answering_after_the_read_timeout_is_502(upstreams: Upstreams) -> None:
    """Injected: every chunk delayed 4 s, longer than the 3 s read timeout.
    Asserted: 502 at the read timeout, not after the late answer."""
    call = upstreams.call("late")
    faultlog.record("upstream: 4 s delay per chunk", tally([call]), call.seconds)
    assert call.outcome == "502", repr(call.error)
    assert within(call.seconds, READ_S), call.seconds


def test_a_dead_upstream_is_502_within_the_connect_timeout(upstreams: Upstreams) -> None:
    """Injected: the model's only endpoint is a port nothing listens on (connection
    refused). Asserted: 502 within the connect timeout (the refusal is immediate)."""
    call = upstreams.call("dead", timeout_s=CONNECT_S + 4)
    faultlog.record("upstream: connection refused", tally([call]), call.seconds)
    assert call.outcome == "502", repr(call.error)
    assert call.seconds < CONNECT_S + 2


def test_an_unanswered_connect_is_502_at_the_connect_timeout(upstreams: Upstreams) -> None:
    """Injected: the endpoint's accept queue is full, so the TCP handshake never completes.
    Asserted: 502 once the 1 s connect timeout has passed."""
    call = upstreams.call("syn-hang", timeout_s=2 * CONNECT_S + 4)
    faultlog.record("upstream: SYN never answered", tally([call]), call.seconds)
    assert call.outcome == "502", repr(call.error)
    assert within(call.seconds, CONNECT_S), call.seconds


def test_a_refused_endpoint_fails_over_to_the_next_at_once(upstreams: Upstreams) -> None:
    """Injected: the first of a model's two endpoints refuses connections.
    Asserted: 200 from the second, well within the connect timeout."""
    call = upstreams.call("failover-from-dead")
    faultlog.record("upstream: first endpoint refuses, second fine", tally([call]), call.seconds)
    assert call.outcome == "200", repr(call.error)
    assert call.seconds < CONNECT_S + 2


def test_an_unanswered_connect_fails_over_at_the_connect_timeout(upstreams: Upstreams) -> None:
    """Injected: the first of a model's two endpoints never completes the TCP handshake.
    Asserted: 200 from the second once the 1 s connect timeout has passed (the timeout
    fires at its setting)."""
    call = upstreams.call("failover-from-syn-hang")
    faultlog.record("upstream: first endpoint SYN-hangs, second fine", tally([call]), call.seconds)
    assert call.outcome == "200", repr(call.error)
    assert within(call.seconds, CONNECT_S), call.seconds


def test_a_stream_cut_between_two_events_ends_with_an_api_error(upstreams: Upstreams) -> None:
    """Injected: the engine's connection closed right after the 4th SSE event of a stream.
    Asserted: the openai SDK raises APIError once the events before the cut are read."""
    call = upstreams.call("cut-between-events", stream=True, max_tokens=64)
    sent = upstreams.proxies["cut-between-events"].connections()[-1]
    faultlog.record("upstream: stream cut between events", call.outcome, call.seconds)
    assert bytes(sent.down_data).endswith(EVENT_END), "the cut did not fall between events"
    assert isinstance(call.error, openai.APIError), repr(call.error)
    assert call.chunks >= 2


def test_a_stream_cut_inside_an_event_ends_with_an_api_error(upstreams: Upstreams) -> None:
    """Injected: the engine's connection closed 12 bytes into the 4th SSE event.
    Asserted: the openai SDK raises APIError (the client can tell the answer is broken)."""
    call = upstreams.call("cut-inside-an-event", stream=True, max_tokens=64)
    sent = upstreams.proxies["cut-inside-an-event"].connections()[-1]
    faultlog.record("upstream: stream cut inside an event", call.outcome, call.seconds)
    assert not bytes(sent.down_data).endswith(EVENT_END), "the cut was not inside an event"
    assert isinstance(call.error, openai.APIError), repr(call.error)


def test_a_stream_that_stalls_ends_at_the_read_timeout(upstreams: Upstreams) -> None:
    """Injected: after the 4th SSE event the engine's side goes silent, connection open.
    Asserted: the SDK raises APIError one read timeout after the last chunk arrived."""
    call = upstreams.call("stall", stream=True, max_tokens=64)
    faultlog.record("upstream: stream stalls mid-way", call.outcome, call.seconds)
    assert isinstance(call.error, openai.APIError), repr(call.error)
    assert call.last_chunk is not None
    assert within(call.ended - call.last_chunk, READ_S), call.ended - call.last_chunk


def test_a_client_that_stops_sending_its_body_gets_408_at_the_body_timeout(
    upstreams: Upstreams,
) -> None:
    """Injected: a client sends the headers and 20 of its body's bytes, then nothing.
    Asserted: 408 (OpenAI-shaped JSON) once the 1.5 s body timeout has passed."""
    host, port = upstreams.stack.urls["proxy"].removeprefix("http://").split(":")
    body = b'{"model": "f-pass", "messages": [{"role": "user", "content": "hi"}]}'
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    )
    with socket.create_connection((host, int(port)), timeout=2 * BODY_S + 5) as client:
        client.sendall(head + body[:20])
        started = time.monotonic()
        answer = client.recv(65536)
        waited = time.monotonic() - started
    status = answer.split(b"\r\n", 1)[0].decode()
    faultlog.record("client: body stops after 20 bytes", status, waited)
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert b'"error"' in answer
    assert within(waited, BODY_S), waited
