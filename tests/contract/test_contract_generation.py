"""The OpenAI contract for generation, through the official SDK, on the engine and the proxy.

Chat and text completions, streaming with ``stream_options.include_usage``, ``n``,
``stop``, ``seed`` and ``max_tokens``/``finish_reason``: what a client written against
OpenAI relies on. Each test runs on both targets (``flexinfer_testing.contract``).
"""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.chat import ChatCompletionMessageParam

from flexinfer_testing.contract import MODEL, Target
from flexinfer_testing.engines import Process

pytestmark = pytest.mark.timeout(180)

HELLO: list[ChatCompletionMessageParam] = [
    {"role": "developer", "content": "Answer briefly."},
    {"role": "user", "content": "Hello, who are you?"},
]
# The reference engine's extension (as vLLM's): no early end-of-text, so a test that needs
# a given length gets it whatever the random tiny model samples.
FULL_LENGTH: dict[str, Any] = {"ignore_eos": True}


def test_chat_completion_has_openais_shape(target: Target) -> None:
    with target.openai() as client:
        reply = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=8, seed=1)
    assert reply.id.startswith("chatcmpl-")
    assert (reply.object, reply.model) == ("chat.completion", MODEL)
    assert reply.system_fingerprint
    (choice,) = reply.choices
    assert (choice.index, choice.message.role) == (0, "assistant")
    assert isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length")
    usage = reply.usage
    assert usage is not None
    assert 1 <= usage.completion_tokens <= 8
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    if choice.finish_reason == "length":
        assert usage.completion_tokens == 8


def test_max_tokens_ends_a_choice_with_length(target: Target) -> None:
    with target.openai() as client:
        chat = client.chat.completions.create(
            model=MODEL, messages=HELLO, max_tokens=5, extra_body=FULL_LENGTH
        )
        newer = client.chat.completions.create(
            model=MODEL, messages=HELLO, max_completion_tokens=3, extra_body=FULL_LENGTH
        )
    assert chat.choices[0].finish_reason == "length"
    assert chat.usage is not None
    assert chat.usage.completion_tokens == 5
    assert newer.usage is not None
    assert newer.usage.completion_tokens == 3


def test_n_gives_that_many_choices(target: Target) -> None:
    with target.openai() as client:
        reply = client.chat.completions.create(
            model=MODEL, messages=HELLO, n=3, max_tokens=4, seed=5, extra_body=FULL_LENGTH
        )
    assert [c.index for c in reply.choices] == [0, 1, 2]
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 3 * 4


def test_the_same_seed_gives_the_same_output(target: Target) -> None:
    with target.openai() as client:
        first, again, other = (
            client.chat.completions.create(
                model=MODEL, messages=HELLO, max_tokens=24, seed=seed, temperature=1.0
            )
            for seed in (7, 7, 8)
        )
    assert first.choices[0].message == again.choices[0].message
    assert first.choices[0].message.content != other.choices[0].message.content


def test_stop_ends_the_text_before_the_stop_string(target: Target) -> None:
    request: dict[str, Any] = {"model": MODEL, "prompt": "Tell me", "max_tokens": 30, "seed": 11}
    with target.openai() as client:
        full = client.completions.create(**request, extra_body=FULL_LENGTH).choices[0].text
        stop = full[10:12]
        cut = client.completions.create(**request, stop=[stop], extra_body=FULL_LENGTH)
    assert len(full) >= 12, "a long enough text to pick a stop string from"
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].text == full[: full.find(stop)]


def test_chat_stream_ends_with_a_usage_chunk(target: Target) -> None:
    with target.openai() as client:
        plain = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=12, seed=2)
        stream = client.chat.completions.create(
            model=MODEL,
            messages=HELLO,
            max_tokens=12,
            seed=2,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
    *body, last = chunks
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    assert last.choices == []
    assert last.usage is not None
    assert plain.usage is not None
    assert last.usage.model_dump() == plain.usage.model_dump()
    assert all(c.usage is None for c in body)
    assert body[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in body)
    assert text == plain.choices[0].message.content
    assert body[-1].choices[0].finish_reason == plain.choices[0].finish_reason


def test_text_completions_take_several_prompts_and_n(target: Target) -> None:
    with target.openai() as client:
        reply = client.completions.create(
            model=MODEL, prompt=["ab", "xyz"], n=2, max_tokens=4, seed=3, extra_body=FULL_LENGTH
        )
    assert reply.id.startswith("cmpl-")
    assert (reply.object, reply.model) == ("text_completion", MODEL)
    assert [c.index for c in reply.choices] == [0, 1, 2, 3]
    assert all(c.finish_reason == "length" for c in reply.choices)
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 16


def test_text_completion_stream_ends_with_a_usage_chunk(target: Target) -> None:
    request: dict[str, Any] = {"model": MODEL, "prompt": "ab", "max_tokens": 6, "seed": 3}
    with target.openai() as client:
        plain = client.completions.create(**request)
        stream = client.completions.create(
            **request, stream=True, stream_options={"include_usage": True}
        )
        chunks = list(stream)
    *body, last = chunks
    assert last.choices == []
    assert last.usage is not None
    assert plain.usage is not None
    assert last.usage.model_dump() == plain.usage.model_dump()
    assert "".join(c.choices[0].text for c in body) == plain.choices[0].text
    assert body[-1].choices[0].finish_reason == plain.choices[0].finish_reason


def test_tool_turns_in_the_history_are_accepted(target: Target) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "now", "arguments": "{}"}}
    history: list[ChatCompletionMessageParam] = [
        *HELLO,
        {"role": "assistant", "content": None, "tool_calls": [call]},  # type: ignore[list-item]
        {"role": "tool", "tool_call_id": "call_1", "content": "12:00"},
    ]
    with target.openai() as client:
        reply = client.chat.completions.create(model=MODEL, messages=history, max_tokens=2)
    assert reply.choices[0].message.role == "assistant"


def test_models_are_listed_and_retrieved(target: Target) -> None:
    with target.openai() as client:
        listed = client.models.list().data
        one = client.models.retrieve(MODEL)
    (card,) = (m for m in listed if m.id == MODEL)
    assert (card.object, card.owned_by) == ("model", "flexinfer")
    assert card.created > 0
    assert (card.model_extra or {}).get("parent", "absent") is None, "a base model, as vLLM"
    assert (one.id, one.object, one.owned_by) == (MODEL, "model", "flexinfer")


def test_the_proxy_answers_what_the_engine_answers(
    contract_engine: Process, contract_proxy: Process
) -> None:
    engine, proxy = Target("engine", contract_engine.url), Target("proxy", contract_proxy.url)
    answers = []
    for each in (engine, proxy):
        with each.openai() as client:
            reply = client.chat.completions.create(
                model=MODEL, messages=HELLO, max_tokens=16, seed=42, n=2
            )
        answers.append((reply.model, reply.choices, reply.usage, reply.system_fingerprint))
    assert answers[0] == answers[1]
