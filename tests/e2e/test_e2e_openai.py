"""The walking skeleton, end to end: the official openai SDK against whole stacks.

Every test runs twice: against ``flexinfer up`` (embedded) and against separate controller
and proxy processes sharing the real Redis and PostgreSQL (distributed).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from flexinfer_testing.stack import Stack, StackFactory

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

MESSAGES: list[openai.types.chat.ChatCompletionMessageParam] = [
    {"role": "user", "content": "Hello, who are you?"}
]


def client(stack: Stack, timeout: float) -> openai.OpenAI:
    """An openai SDK client pointed at the stack's proxy."""
    return openai.OpenAI(base_url=stack.base_url, api_key="unused", max_retries=0, timeout=timeout)


def chat(stack: Stack, model: str = "tiny", max_tokens: int = 16) -> str:
    """One chat completion through the proxy; returns the text."""
    with client(stack, timeout=90) as sdk:
        reply = sdk.chat.completions.create(model=model, messages=MESSAGES, max_tokens=max_tokens)
    text = reply.choices[0].message.content
    assert text is not None
    return text


def test_first_request_cold_starts_the_engine(stacks: StackFactory) -> None:
    stack = stacks.start()
    stack.apply_model("tiny")
    time.sleep(0.5)
    assert stack.engine_processes() == [], "scaled to zero: no engine before the first request"

    text = chat(stack)

    assert text.strip(), "the completion returns text"
    assert len(stack.engine_processes()) == 1


def test_stream_delivers_chunks_incrementally(stacks: StackFactory) -> None:
    stack = stacks.start()
    stack.apply_model("tiny")
    chat(stack, max_tokens=1)  # warm: this test is about streaming, not activation
    arrivals: list[float] = []
    pieces: list[str] = []
    with client(stack, timeout=90) as sdk:
        stream = sdk.chat.completions.create(
            model="tiny", messages=MESSAGES, max_tokens=200, stream=True, temperature=0.8, seed=1
        )
        for chunk in stream:
            arrivals.append(time.monotonic())
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
    assert len(arrivals) > 10
    assert "".join(pieces)
    spread = arrivals[-1] - arrivals[0]
    assert spread > 0.05, (
        f"all chunks arrived within {spread * 1000:.1f} ms: buffered, not streamed"
    )


def test_ten_concurrent_cold_requests_start_one_engine(stacks: StackFactory) -> None:
    stack = stacks.start()
    stack.apply_model("tiny")
    seen: set[int] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.update(p.pid for p in stack.engine_processes())
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with ThreadPoolExecutor(10) as pool:
            texts = list(pool.map(lambda _: chat(stack), range(10)))
    finally:
        done.set()
        watcher.join()
    assert all(text.strip() for text in texts)
    assert len(seen) == 1, f"expected exactly one engine, saw pids {sorted(seen)}"
    assert len(stack.engine_processes()) == 1


def test_idle_model_scales_to_zero_and_cold_starts_again(stacks: StackFactory) -> None:
    stack = stacks.start()
    stack.apply_model("tiny", idleTimeout="2s")
    chat(stack)
    (first,) = stack.wait_engines(1)

    assert stack.wait_engines(0, timeout=30) == [], "the idle model went back to zero"

    chat(stack)
    (second,) = stack.wait_engines(1)
    assert second.pid != first.pid


def test_unknown_model_and_malformed_json(stacks: StackFactory) -> None:
    stack = stacks.start()
    stack.apply_model("tiny")
    with client(stack, timeout=30) as sdk, pytest.raises(openai.NotFoundError):
        sdk.chat.completions.create(model="no-such-model", messages=MESSAGES)

    response = httpx.post(
        f"{stack.base_url}/chat/completions",
        content=b'{"model": "tiny", "messages": [',
        headers={"Content-Type": "application/json"},
        timeout=30,
    )
    assert response.status_code == 400
    assert response.json()["error"]["message"]


def test_full_queue_answers_503_with_retry_after(stacks: StackFactory) -> None:
    stack = stacks.start(FLEXINFER_PROXY_MAX_QUEUE_SIZE="2")
    stack.apply_model("tiny")

    def raw_chat(_: int) -> httpx.Response:
        body = {"model": "tiny", "messages": MESSAGES, "max_tokens": 4}
        return httpx.post(f"{stack.base_url}/chat/completions", json=body, timeout=90)

    with ThreadPoolExecutor(6) as pool:
        responses = list(pool.map(raw_chat, range(6)))
    statuses = sorted(r.status_code for r in responses)
    rejected = [r for r in responses if r.status_code == 503]
    assert statuses.count(200) >= 2, statuses
    assert rejected, f"six cold requests against a queue of two: expected 503s, got {statuses}"
    for response in rejected:
        assert int(response.headers["Retry-After"]) >= 1
        assert response.json()["error"]["message"]


def test_restarted_controller_adopts_the_running_engine(stacks: StackFactory) -> None:
    stack = stacks.start()
    stack.apply_model("tiny")
    chat(stack)
    (engine,) = stack.wait_engines(1)
    failures: list[BaseException] = []
    served = 0
    stop = threading.Event()

    def keep_calling() -> None:
        nonlocal served
        while not stop.is_set():
            try:
                chat(stack, max_tokens=2)
                served += 1
            except Exception as exc:  # every failure is a lost request
                failures.append(exc)

    traffic = threading.Thread(target=keep_calling)
    distributed = stack.mode == "distributed"
    if distributed:
        traffic.start()
    try:
        stacks.controller_process(stack).kill()
        stacks.controller_process(stack).wait(10)
        time.sleep(0.5)
        assert [p.pid for p in stack.engine_processes()] == [engine.pid], "engine survives"
        stacks.start_controller(stack)
        time.sleep(1.0)
    finally:
        stop.set()
        if distributed:
            traffic.join()

    assert chat(stack).strip()
    assert [p.pid for p in stack.engine_processes()] == [engine.pid], "adopted, not duplicated"
    if distributed:
        assert failures == [], f"requests lost while the controller restarted: {failures!r}"
        assert served > 0
