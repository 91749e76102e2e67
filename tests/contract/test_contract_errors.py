"""The OpenAI contract for errors, on the engine and the proxy alike.

Every refusal is OpenAI's error object ``{"error": {"message", "type", "param", "code"}}``
with the HTTP status that makes the SDK raise the right class: an unknown model is a
NotFoundError, a bad or unsupported parameter a BadRequestError naming it. What the SDK
cannot send (no Content-Type, a wrong method, a path nobody serves) goes through httpx.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from flexinfer_testing.contract import MODEL, Target

pytestmark = pytest.mark.timeout(180)

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Hello"}]
ERROR_KEYS = {"message", "type", "param", "code"}


def openai_error(response: httpx.Response) -> dict[str, Any]:
    """The error object of an answer, checked to be OpenAI's shape (never ``detail``)."""
    body = response.json()
    assert set(body) == {"error"}, body
    error: dict[str, Any] = body["error"]
    assert set(error) == ERROR_KEYS, error
    assert isinstance(error["message"], str)
    assert error["message"]
    return error


def test_an_unknown_model_is_not_found(target: Target) -> None:
    with target.openai() as client:
        with pytest.raises(openai.NotFoundError) as chat:
            client.chat.completions.create(model="no-such-model", messages=HELLO)
        with pytest.raises(openai.NotFoundError) as completion:
            client.completions.create(model="no-such-model", prompt="x")
        with pytest.raises(openai.NotFoundError) as retrieved:
            client.models.retrieve("no-such-model")
    for raised in (chat.value, completion.value, retrieved.value):
        assert raised.status_code == 404
        assert (raised.type, raised.code) == ("invalid_request_error", "model_not_found")
    assert chat.value.param == "model"


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"temperature": 5}, "temperature"),
        ({"n": 0}, "n"),
        ({"max_tokens": 100_000}, "max_tokens"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
    ],
)
def test_a_bad_parameter_is_a_bad_request_naming_it(
    target: Target, extra: dict[str, Any], param: str
) -> None:
    with target.openai() as client, pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model=MODEL, messages=HELLO, extra_body=extra)
    assert (raised.value.status_code, raised.value.param) == (400, param)
    assert raised.value.type == "invalid_request_error"


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"logprobs": True, "top_logprobs": 2}, "logprobs"),
        ({"logit_bias": {"65": 10}}, "logit_bias"),
        ({"modalities": ["text", "audio"]}, "modalities"),
    ],
)
def test_an_unsupported_parameter_is_refused_not_ignored(
    target: Target, extra: dict[str, Any], param: str
) -> None:
    with target.openai() as client, pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model=MODEL, messages=HELLO, extra_body=extra)
    assert (raised.value.param, raised.value.code) == (param, "unsupported_parameter")


def test_an_unknown_member_is_refused_as_openai_does(target: Target) -> None:
    with target.openai() as client, pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model=MODEL, messages=HELLO, extra_body={"top_k": 5})
    assert raised.value.param == "top_k"
    assert "Unrecognized request argument supplied: top_k" in raised.value.message


@pytest.mark.parametrize("value", ["yes", 1, "true"])
def test_stream_must_be_a_boolean(target: Target, value: object) -> None:
    with target.openai() as client, pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(
            model=MODEL, messages=HELLO, max_tokens=2, extra_body={"stream": value}
        )
    assert raised.value.param == "stream"


def test_accepted_parameters_with_no_effect_here(target: Target) -> None:
    with target.openai() as client:
        reply = client.chat.completions.create(
            model=MODEL,
            messages=HELLO,
            max_tokens=2,
            user="user-1",
            store=False,
            metadata={"team": "a"},
            service_tier="auto",
            tool_choice="none",
            response_format={"type": "text"},
            logprobs=False,
        )
    assert reply.choices[0].message.role == "assistant"


@pytest.mark.parametrize("content_type", [None, ""])
def test_a_body_without_a_content_type_is_a_bad_request(
    target: Target, content_type: str | None
) -> None:
    body = json.dumps({"model": MODEL, "messages": HELLO, "max_tokens": 2}).encode()
    headers = {} if content_type is None else {"content-type": content_type}
    with target.http() as http:
        response = http.post("/v1/chat/completions", content=body, headers=headers)
        declared = http.post(
            "/v1/chat/completions", content=body, headers={"content-type": "application/json"}
        )
    assert response.status_code == 400
    error = openai_error(response)
    assert error["type"] == "invalid_request_error"
    assert "Content-Type" in error["message"]
    assert declared.status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("POST", "/v1/embeddings", 404),
        ("POST", "/v1/no-such-route", 404),
        ("GET", "/v1/no-such-route", 404),
        ("GET", "/v1/chat/completions", 405),
        ("PUT", "/v1/completions", 405),
    ],
)
def test_routing_refusals_are_openai_errors(
    target: Target, method: str, path: str, status: int
) -> None:
    with target.http() as http:
        response = http.request(method, path, json={"model": MODEL, "input": "x"})
    assert response.status_code == status
    assert openai_error(response)["type"] == "invalid_request_error"
    if status == 405:
        assert "POST" in response.headers["allow"]


def test_embeddings_of_a_model_that_has_none_raise_not_found(target: Target) -> None:
    with target.openai() as client, pytest.raises(openai.NotFoundError) as raised:
        client.embeddings.create(model=MODEL, input="hello")
    assert raised.value.type == "invalid_request_error"
