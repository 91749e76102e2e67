"""The engines' LoRA API over HTTP: vLLM's error bodies (old flat, new nested, FastAPI's),
adapter cards, and which answers are refusals (4xx) or unavailability (5xx, no answer)."""

from __future__ import annotations

import json

import pytest

from flexinfer_controller.adapters.lora.http import HttpAdapterEngine, adapter_cards, error_message
from flexinfer_controller.backends import AdapterEndpoints
from flexinfer_controller.core.lora.engine import EngineRefusedError, EngineUnavailableError
from flexinfer_testing.ports import free_port

API = AdapterEndpoints("/v1/load_lora_adapter", "/v1/unload_lora_adapter")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"object": "error", "message": "The lora adapter 'x' has already been loaded.",
          "type": "InvalidUserInput", "code": 400},
         "The lora adapter 'x' has already been loaded."),
        ({"error": {"message": "No adapter found for /a", "type": "NotFoundError", "code": 404}},
         "No adapter found for /a"),
        ({"detail": "Not Found"}, "Not Found"),
    ],
)  # fmt: skip
def test_error_messages_of_each_vllm_shape(body: dict[str, object], message: str) -> None:
    assert error_message(json.dumps(body).encode()) == message


def test_error_text_is_printable_and_bounded() -> None:
    assert error_message(b"boom\x1b[31m\nline") == "boom [31m line"
    assert len(error_message(b"x" * 10_000)) == 2000
    assert error_message(b"") == "(no message)"


def test_adapter_cards_are_those_with_a_parent() -> None:
    body = {"object": "list", "data": [
        {"id": "base", "root": "/models/base", "parent": None},
        {"id": "sql", "root": "/loras/sql", "parent": "base"},
        {"id": "odd", "parent": "base"},
        "junk",
    ]}  # fmt: skip
    assert adapter_cards(json.dumps(body).encode(), "t") == {"sql": "/loras/sql", "odd": None}
    with pytest.raises(EngineUnavailableError, match="not an OpenAI model list"):
        adapter_cards(b"<html>", "t")


async def test_no_engine_listening_is_unavailable_not_refused() -> None:
    engine = HttpAdapterEngine(list_timeout_s=2, load_timeout_s=2)
    url = f"http://127.0.0.1:{free_port()}"
    try:
        with pytest.raises(EngineUnavailableError, match="GET"):
            await engine.listed(url, API)
        with pytest.raises(EngineUnavailableError, match="load_lora_adapter"):
            await engine.load(url, API, "sql", "/loras/sql")
    finally:
        await engine.aclose()
    assert not issubclass(EngineUnavailableError, EngineRefusedError)
