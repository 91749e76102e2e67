"""Every OpenAI request parameter is honoured, accepted with a reason, or refused by name."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from openai.types import completion_create_params
from openai.types.chat import completion_create_params as chat_create_params

from flexinfer_engine.core.engine import InferenceEngine
from flexinfer_engine.core.parameters import ACCEPTED, CHAT_REFUSED, COMPLETION_REFUSED
from flexinfer_engine.core.requests import ChatCompletionRequest, CompletionRequest
from flexinfer_engine.core.weights import generate_model
from flexinfer_engine.settings import EngineSettings
from flexinfer_testing.engines import app_client, loaded_engine

NAME = "tiny-params"
USER = [{"role": "user", "content": "Hi"}]
IMAGE = {"type": "image_url", "image_url": {"url": "x"}}

# A value that asks for the feature, per refused parameter (a new table entry needs one).
CHAT_ON: dict[str, Any] = {
    "frequency_penalty": 0.5,
    "presence_penalty": -1.0,
    "logit_bias": {"65": 5},
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    "tool_choice": "auto",
    "parallel_tool_calls": False,
    "functions": [{"name": "f"}],
    "function_call": "auto",
    "response_format": {"type": "json_object"},
    "logprobs": True,
    "top_logprobs": 2,
    "audio": {"voice": "alloy", "format": "wav"},
    "modalities": ["text", "audio"],
    "prediction": {"type": "content", "content": "Hi"},
    "reasoning_effort": "low",
    "verbosity": "low",
    "web_search_options": {},
    "moderation": {},
}
COMPLETION_ON: dict[str, Any] = {
    "frequency_penalty": 1.0,
    "presence_penalty": 1.0,
    "logit_bias": {"65": -100},
    "logprobs": 0,
    "echo": True,
    "suffix": "end",
    "best_of": 3,
}
CHAT_ACCEPTED: dict[str, Any] = {
    "user": "u-1",
    "safety_identifier": "s-1",
    "store": True,
    "metadata": {"team": "a"},
    "service_tier": "flex",
    "prompt_cache_key": "k",
    "prompt_cache_retention": "24h",
    "prompt_cache_options": {"mode": "implicit"},
    "tool_choice": "none",
    "response_format": {"type": "text"},
    "modalities": ["text"],
    "logprobs": False,
    "frequency_penalty": 0,
    "logit_bias": {},
    "stream_options": {"include_usage": True, "include_obfuscation": False},
    "stream": True,
}


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> InferenceEngine:
    return loaded_engine(generate_model(tmp_path_factory.mktemp("tiny"), name="p", preset="tiny"))


@pytest.fixture
async def client(engine: InferenceEngine) -> AsyncIterator[httpx.AsyncClient]:
    settings = EngineSettings(model_dir=engine.model_dir, served_model_name=NAME)
    async with app_client(settings, engine) as http:
        yield http


def _sdk_fields(params: type) -> set[str]:
    return set(params.__annotations__) | {"stream"}


@pytest.mark.parametrize(
    ("request_model", "sdk", "refused"),
    [
        (ChatCompletionRequest, chat_create_params.CompletionCreateParamsBase, CHAT_REFUSED),
        (
            CompletionRequest,
            completion_create_params.CompletionCreateParamsBase,
            COMPLETION_REFUSED,
        ),
    ],
)
def test_every_sdk_parameter_is_declared_and_classified(
    request_model: type[ChatCompletionRequest | CompletionRequest],
    sdk: type,
    refused: dict[str, Any],
) -> None:
    declared = set(request_model.model_fields)
    assert _sdk_fields(sdk) <= declared, "parameters the SDK sends that the engine lacks"
    assert set(refused) <= declared
    assert not set(refused) & set(ACCEPTED), "a parameter is either refused or accepted"
    assert set(ACCEPTED) & declared == set(ACCEPTED) & _sdk_fields(sdk)
    assert declared - _sdk_fields(sdk) == {"ignore_eos"}, "vLLM's one extension, no other"


@pytest.mark.parametrize(("name", "value"), sorted(CHAT_ON.items()))
async def test_chat_refuses_what_it_cannot_do(
    client: httpx.AsyncClient, name: str, value: Any
) -> None:
    assert set(CHAT_ON) == set(CHAT_REFUSED)
    body = {"model": NAME, "messages": USER, name: value}
    response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["param"], error["code"]) == (name, "unsupported_parameter")
    assert error["type"] == "invalid_request_error"
    assert name in error["message"]


@pytest.mark.parametrize(("name", "value"), sorted(COMPLETION_ON.items()))
async def test_completions_refuse_what_they_cannot_do(
    client: httpx.AsyncClient, name: str, value: Any
) -> None:
    assert set(COMPLETION_ON) == set(COMPLETION_REFUSED)
    body = {"model": NAME, "prompt": "Hi", name: value}
    response = await client.post("/v1/completions", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == name


async def test_meaningless_and_off_values_are_accepted(client: httpx.AsyncClient) -> None:
    body = {"model": NAME, "messages": USER, "max_tokens": 2, **CHAT_ACCEPTED}
    response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    assert response.text.endswith("data: [DONE]\n\n")
    plain = {"model": NAME, "prompt": "Hi", "max_tokens": 2, "best_of": 2, "n": 2, "echo": False}
    assert (await client.post("/v1/completions", json=plain)).status_code == 200


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([{"role": "user", "content": [IMAGE]}], "messages[0].content[0].type"),
        ([{"role": "wizard", "content": "x"}], "messages[0].role"),
        ([{"content": "x"}], "messages[0].role"),
        ([*USER, {"role": "tool", "content": "42"}], "messages[1].tool_call_id"),
        ([{"role": "user", "content": [{"type": "text", "text": "a", "x": 1}]}],
         "messages[0].content[0].x"),
        ([{"role": "user", "content": [{"type": "text"}]}], "messages[0].content[0].text"),
        ([{"role": "user", "content": 5}], "messages[0].content"),
    ],
)  # fmt: skip
async def test_message_errors_name_the_member(
    client: httpx.AsyncClient, messages: list[Any], param: str
) -> None:
    body = {"model": NAME, "messages": messages}
    response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


async def test_every_openai_role_is_accepted(client: httpx.AsyncClient) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [
        {"role": "developer", "content": "Be brief."},
        {"role": "system", "content": [{"type": "text", "text": "Really."}]},
        *USER,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": "42", "tool_call_id": "call_1"},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
    ]
    body = {"model": NAME, "messages": messages, "max_tokens": 3}
    response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    # The tool's turn and the earlier call are part of the prompt the model reads.
    assert response.json()["usage"]["prompt_tokens"] > len('"call_1"<|tool|>\n42')


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"stream": "yes"}, "stream", "invalid_request"),
        ({"max_tokens": "5"}, "max_tokens", "invalid_request"),
        ({"n": True}, "n", "invalid_request"),
        ({"temperature": "0.5"}, "temperature", "invalid_request"),
        ({"top_k": 5}, "top_k", "unknown_parameter"),
        ({"stream_options": {"include_usage": 1}, "stream": True},
         "stream_options.include_usage", "invalid_request"),
        ({"max_completion_tokens": 10_000}, "max_completion_tokens", "invalid_request"),
    ],
)  # fmt: skip
async def test_types_are_strict_and_unknown_members_refused(
    client: httpx.AsyncClient, body: dict[str, Any], param: str, code: str
) -> None:
    response = await client.post(
        "/v1/chat/completions", json={"model": NAME, "messages": USER, **body}
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["param"], error["code"]) == (param, code)


@pytest.mark.parametrize(
    ("headers", "says"),
    [({}, "no Content-Type"), ({"content-type": "text/plain"}, "'text/plain'")],
)
async def test_a_body_must_be_declared_json(
    client: httpx.AsyncClient, headers: dict[str, str], says: str
) -> None:
    body = b'{"model": "%s", "prompt": "Hi", "max_tokens": 1}' % NAME.encode()
    response = await client.post("/v1/completions", content=body, headers=headers)
    assert response.status_code == 400
    assert says in response.json()["error"]["message"]
    declared = {"content-type": "application/json; charset=utf-8"}
    assert (await client.post("/v1/completions", content=body, headers=declared)).status_code == 200


async def test_models_are_listed_and_retrieved_as_vllm_lists_them(
    client: httpx.AsyncClient,
) -> None:
    (card,) = (await client.get("/v1/models")).json()["data"]
    assert card["parent"] is None
    assert (await client.get(f"/v1/models/{NAME}")).json() == card
    missing = await client.get("/v1/models/other")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "model_not_found"
    assert missing.json()["error"]["type"] == "invalid_request_error"
