"""The HTTP API through the ASGI app: OpenAI shapes, streaming framing, errors, sleep/wake."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from flexinfer_engine.api.metrics import kv_cache_gauge, request_gauges
from flexinfer_engine.core.engine import InferenceEngine
from flexinfer_engine.core.weights import generate_model
from flexinfer_engine.settings import EngineSettings
from flexinfer_testing.engines import app_client, loaded_engine

NAME = "tiny-test"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_model(tmp_path_factory.mktemp("tiny"), name="api", preset="tiny")


@pytest.fixture(scope="module")
def engine(model_dir: Path) -> InferenceEngine:
    return loaded_engine(model_dir)


def _settings(model_dir: Path) -> EngineSettings:
    return EngineSettings(model_dir=model_dir, served_model_name=NAME, max_body_bytes=4096)


@pytest.fixture
async def client(model_dir: Path, engine: InferenceEngine) -> AsyncIterator[httpx.AsyncClient]:
    async with app_client(_settings(model_dir), engine) as http:
        yield http


def _chat(**extra: Any) -> dict[str, Any]:
    return {"model": NAME, "messages": [{"role": "user", "content": "Hello"}], **extra}


async def test_models(client: httpx.AsyncClient) -> None:
    body = (await client.get("/v1/models")).json()
    assert body["object"] == "list"
    assert [(m["id"], m["owned_by"]) for m in body["data"]] == [(NAME, "flexinfer")]


async def test_chat_completion(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/chat/completions", json=_chat(max_tokens=12, seed=1))
    assert response.status_code == 200
    body = response.json()
    assert body["id"].startswith("chatcmpl-")
    assert body["object"] == "chat.completion"
    assert body["model"] == NAME
    assert body["system_fingerprint"].startswith("fp_")
    assert isinstance(body["created"], int)
    (choice,) = body["choices"]
    assert choice["message"]["role"] == "assistant"
    assert choice["finish_reason"] == "length"
    assert len(choice["message"]["content"]) > 0
    usage = body["usage"]
    prompt = "<|user|>\nHello\n<|assistant|>\n"
    assert usage == {
        "prompt_tokens": 1 + len(prompt),
        "completion_tokens": 12,
        "total_tokens": 13 + len(prompt),
    }
    again = (await client.post("/v1/chat/completions", json=_chat(max_tokens=12, seed=1))).json()
    assert again["choices"][0]["message"] == choice["message"]


async def test_completion_list_of_prompts_and_n(client: httpx.AsyncClient) -> None:
    request = {"model": NAME, "prompt": ["ab", "xyz"], "n": 2, "max_tokens": 5, "seed": 3}
    body = (await client.post("/v1/completions", json=request)).json()
    assert body["id"].startswith("cmpl-")
    assert body["object"] == "text_completion"
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    assert all(c["finish_reason"] == "length" for c in body["choices"])
    assert body["usage"] == {"prompt_tokens": 3 + 4, "completion_tokens": 20, "total_tokens": 27}


async def test_default_completion_max_tokens_and_stop(client: httpx.AsyncClient) -> None:
    request = {"model": NAME, "prompt": "Tell me", "max_tokens": 30, "seed": 11}
    full = (await client.post("/v1/completions", json=request)).json()["choices"][0]["text"]
    stop = full[5:7]
    body = (await client.post("/v1/completions", json={**request, "stop": stop})).json()
    assert body["choices"][0] == {
        "index": 0,
        "logprobs": None,
        "finish_reason": "stop",
        "text": full[: full.find(stop)],
    }


def _events(text: str) -> list[Any]:
    assert text.endswith("data: [DONE]\n\n")
    frames = text.split("\n\n")
    assert frames[-1] == ""
    assert all(f.startswith("data: ") for f in frames[:-1])
    return [json.loads(f[6:]) for f in frames[:-2]]


async def test_chat_stream_framing(client: httpx.AsyncClient) -> None:
    request = _chat(max_tokens=10, seed=2, stream=True, stream_options={"include_usage": True})
    response = await client.post("/v1/chat/completions", json=request)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    chunks = _events(response.text)
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-2]["choices"][0]["delta"] == {}
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 10
    assert all(c["usage"] is None for c in chunks[:-1])
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1])
    plain = (await client.post("/v1/chat/completions", json=_chat(max_tokens=10, seed=2))).json()
    assert text == plain["choices"][0]["message"]["content"]


async def test_completion_stream_without_usage(client: httpx.AsyncClient) -> None:
    request = {"model": NAME, "prompt": "hi", "max_tokens": 4, "stream": True, "n": 2}
    chunks = _events((await client.post("/v1/completions", json=request)).text)
    assert all(c["object"] == "text_completion" and "usage" not in c for c in chunks)
    finals = [c["choices"][0] for c in chunks if c["choices"][0]["finish_reason"]]
    assert sorted(f["index"] for f in finals) == [0, 1]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (_chat(temperature=2.5), "temperature"),
        (_chat(top_p=0), "top_p"),
        (_chat(n=9), "n"),
        (_chat(max_tokens=0), "max_tokens"),
        (_chat(max_tokens=100_000), "max_tokens"),
        (_chat(stop=["a", "b", "c", "d", "e"]), "stop"),
        (_chat(presence_penalty=1.0), "presence_penalty"),
        (_chat(stream_options={"include_usage": True}), "stream_options"),
        ({"model": NAME, "messages": []}, "messages"),
        ({"model": NAME, "messages": [{"role": "wizard", "content": "x"}]}, None),
        ({"model": NAME, "messages": [{"role": "user", "content": "x" * 600}]}, "messages"),
    ],
)
async def test_validation_errors(
    client: httpx.AsyncClient, body: dict[str, Any], param: str | None
) -> None:
    response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["message"]
    if param is not None:
        assert error["param"] is not None
        assert error["param"].startswith(param)


async def test_protocol_errors(client: httpx.AsyncClient) -> None:
    bad_json = await client.post(
        "/v1/completions", content=b"{nope", headers={"content-type": "application/json"}
    )
    assert bad_json.status_code == 400
    assert bad_json.json()["error"]["type"] == "invalid_request_error"
    unknown = await client.post("/v1/chat/completions", json={**_chat(), "model": "other"})
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "model_not_found"
    huge = await client.post("/v1/completions", json={"model": NAME, "prompt": "x" * 5000})
    assert huge.status_code == 413
    bad_ids = await client.post("/v1/completions", json={"model": NAME, "prompt": [999]})
    assert bad_ids.status_code == 400


async def test_health_info_and_metrics(client: httpx.AsyncClient) -> None:
    health = await client.get("/healthz")
    assert health.status_code == 200
    # Without compile mode no compile cache was obtained.
    assert health.json()["compile_cache"] == {"source": "none", "seconds": 0.0}
    assert (await client.get("/readyz")).status_code == 200
    await client.post("/v1/completions", json={"model": NAME, "prompt": "a", "max_tokens": 3})
    info = (await client.get("/engine/info")).json()
    assert info["model"] == NAME
    assert info["sleeping"] is False
    assert info["weight_load_seconds"] > 0
    assert info["process_start_seconds"] > 0
    metrics = (await client.get("/metrics")).text
    assert "flexinfer_engine_generated_tokens_total 3.0" in metrics
    assert "flexinfer_engine_time_to_first_token_seconds_count 1.0" in metrics


@pytest.mark.parametrize("level", [1, 2])
async def test_sleep_and_wake(model_dir: Path, level: int) -> None:
    engine = loaded_engine(model_dir)
    async with app_client(_settings(model_dir), engine) as http:
        request = _chat(max_tokens=8, seed=4)
        before = (await http.post("/v1/chat/completions", json=request)).json()
        assert (await http.post(f"/sleep?level={level}")).status_code == 200
        assert (await http.get("/is_sleeping")).json() == {"is_sleeping": True}
        assert engine.parameter_bytes() == 0
        assert (await http.get("/readyz")).status_code == 503
        assert (await http.get("/healthz")).status_code == 200
        refused = await http.post("/v1/chat/completions", json=request)
        assert refused.status_code == 503
        assert int(refused.headers["retry-after"]) >= 1
        assert (await http.get("/engine/info")).json()["sleeping"] is True
        assert (await http.post("/wake_up")).status_code == 200
        assert (await http.get("/is_sleeping")).json() == {"is_sleeping": False}
        after = (await http.post("/v1/chat/completions", json=request)).json()
        assert after["choices"] == before["choices"]
        assert (await http.post("/sleep?level=3")).status_code == 400


def test_kv_cache_gauge_is_the_share_of_admitted_positions() -> None:
    registry = CollectorRegistry()
    held = [0]
    kv_cache_gauge(registry, lambda: held[0], capacity=400)
    name = "flexinfer_engine_kv_cache_usage_perc"
    assert registry.get_sample_value(name) == 0.0
    held[0] = 100
    assert registry.get_sample_value(name) == 0.25
    held[0] = 1000  # n > 1 choices can hold more than the admitted sequences' share
    assert registry.get_sample_value(name) == 1.0


async def test_metrics_expose_the_kv_cache_usage(client: httpx.AsyncClient) -> None:
    metrics = (await client.get("/metrics")).text
    assert "flexinfer_engine_kv_cache_usage_perc 0.0" in metrics


def test_request_gauges_count_running_and_waiting_requests() -> None:
    registry = CollectorRegistry()
    counts = {"running": 2, "waiting": 5}
    request_gauges(registry, lambda: counts["running"], lambda: counts["waiting"])
    assert registry.get_sample_value("flexinfer_engine_num_requests_running") == 2.0
    assert registry.get_sample_value("flexinfer_engine_num_requests_waiting") == 5.0
    counts["running"] = 0
    assert registry.get_sample_value("flexinfer_engine_num_requests_running") == 0.0


async def test_metrics_expose_no_request_in_flight_once_a_completion_ended(
    client: httpx.AsyncClient,
) -> None:
    await client.post("/v1/completions", json={"model": NAME, "prompt": "a", "max_tokens": 3})
    metrics = (await client.get("/metrics")).text
    assert "flexinfer_engine_num_requests_running 0.0" in metrics
    assert "flexinfer_engine_num_requests_waiting 0.0" in metrics
