"""vLLM's LoRA routes on the engine's app: load/unload bodies and statuses, the model list,
model=<adapter> in completions, concurrency, sleep/wake; the real process with the openai
SDK."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from flexinfer_engine.app import create_app
from flexinfer_engine.core.adapter_weights import generate_adapter
from flexinfer_engine.core.engine import Delta, InferenceEngine
from flexinfer_engine.core.runner import AsyncRunner
from flexinfer_engine.core.sampling import SamplingParams
from flexinfer_engine.core.weights import generate_model
from flexinfer_engine.settings import EngineSettings
from flexinfer_testing.engines import loaded_engine, reference_engine

BASE = "tiny-base"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The adapter root: a model beside it, three adapters (sql, chat, big) inside."""
    top = tmp_path_factory.mktemp("lora")
    model = generate_model(top / "model", name="api", preset="tiny")
    adapters = top / "adapters"
    for name in ("sql", "chat"):
        generate_adapter(adapters / name, name=name, model_dir=model)
    generate_adapter(adapters / "big", name="big", model_dir=model, rank=32)
    return adapters


@pytest.fixture(scope="module")
def engine(root: Path) -> InferenceEngine:
    return loaded_engine(root.parent / "model")


def _settings(engine: InferenceEngine, root: Path | None, **extra: Any) -> EngineSettings:
    roots = [] if root is None else [root]
    return EngineSettings(
        model_dir=engine.model_dir, served_model_name=BASE, lora_roots=roots, **extra
    )


async def _client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://engine")


@pytest.fixture
async def client(engine: InferenceEngine, root: Path) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(
        _settings(engine, root, max_loras=2, max_concurrent_generations=3), engine=engine
    )
    async with await _client(app) as http:
        yield http


async def _load(http: httpx.AsyncClient, name: str, path: Path | str) -> httpx.Response:
    return await http.post(
        "/v1/load_lora_adapter", json={"lora_name": name, "lora_path": str(path)}
    )


async def _complete(http: httpx.AsyncClient, model: str, seed: int = 3) -> httpx.Response:
    body = {"model": model, "prompt": "Once upon a time", "max_tokens": 24, "seed": seed}
    return await http.post("/v1/completions", json=body)


def _vllm_error(response: httpx.Response, status: int, kind: str, message: str) -> None:
    assert response.status_code == status, response.text
    assert response.json() == {
        "error": {"message": message, "type": kind, "param": None, "code": status}
    }


async def test_load_serve_list_and_unload(client: httpx.AsyncClient, root: Path) -> None:
    base = await _complete(client, BASE)
    response = await _load(client, "sql", root / "sql")
    assert response.status_code == 200
    assert response.text == "Success: LoRA adapter 'sql' added successfully."
    models = (await client.get("/v1/models")).json()["data"]
    assert [(m["id"], m["parent"], m["root"]) for m in models] == [
        (BASE, None, BASE),
        ("sql", BASE, str(root / "sql")),
    ]
    assert (await client.get("/v1/models/sql")).json()["parent"] == BASE
    served = await _complete(client, "sql")
    assert served.status_code == 200
    assert served.json()["model"] == "sql"
    assert served.json()["choices"][0]["text"] != base.json()["choices"][0]["text"]
    assert (await _complete(client, "sql")).json()["choices"] == served.json()["choices"]
    info = (await client.get("/engine/info")).json()
    assert (info["lora_adapters"], info["max_loras"], info["max_lora_rank"]) == (["sql"], 2, 16)
    response = await client.post("/v1/unload_lora_adapter", json={"lora_name": "sql"})
    assert response.status_code == 200
    assert response.text == "Success: LoRA adapter 'sql' removed successfully."
    assert [m["id"] for m in (await client.get("/v1/models")).json()["data"]] == [BASE]
    gone = await _complete(client, "sql")
    assert gone.status_code == 404
    assert gone.json()["error"]["message"] == "The model `sql` does not exist."
    assert (await _complete(client, BASE)).json()["choices"] == base.json()["choices"]


async def test_refusals_answer_as_vllm(client: httpx.AsyncClient, root: Path) -> None:
    assert (await _load(client, "sql", root / "sql")).status_code == 200
    _vllm_error(
        await _load(client, "sql", root / "chat"), 400, "InvalidUserInput",
        "The lora adapter 'sql' has already been loaded.",
    )  # fmt: skip
    _vllm_error(
        await _load(client, "", root / "chat"), 400, "InvalidUserInput",
        "Both 'lora_name' and 'lora_path' must be provided.",
    )  # fmt: skip
    _vllm_error(
        await _load(client, "x", root / "missing"), 404, "NotFoundError",
        f"Loading lora x failed: No adapter found for {root / 'missing'}",
    )  # fmt: skip
    _vllm_error(
        await _load(client, "big", root / "big"), 400, "BadRequestError",
        "LoRA rank 32 is greater than max_lora_rank 16.",
    )  # fmt: skip
    outside = await _load(client, "x", root.parent / "model")
    assert outside.status_code == 400
    assert "outside the engine's adapter roots" in outside.json()["error"]["message"]
    assert (await _load(client, "chat", root / "chat")).status_code == 200
    full = await _load(client, "third", root / "chat")
    assert full.status_code == 400
    assert "--max-loras 2" in full.json()["error"]["message"]
    _vllm_error(
        await client.post("/v1/unload_lora_adapter", json={"lora_name": "nope"}), 404,
        "NotFoundError", "The lora adapter 'nope' cannot be found.",
    )  # fmt: skip
    missing = await client.post("/v1/load_lora_adapter", json={"lora_name": "x"})
    assert missing.status_code == 400
    assert missing.json()["error"]["param"] == "lora_path"
    names = [m["id"] for m in (await client.get("/v1/models")).json()["data"]]
    assert names == [BASE, "sql", "chat"]


async def test_load_inplace_replaces_an_adapter(client: httpx.AsyncClient, root: Path) -> None:
    assert (await _load(client, "a", root / "sql")).status_code == 200
    sql = (await _complete(client, "a")).json()["choices"]
    body = {"lora_name": "a", "lora_path": str(root / "chat"), "load_inplace": True}
    assert (await client.post("/v1/load_lora_adapter", json=body)).status_code == 200
    assert (await client.get("/v1/models/a")).json()["root"] == str(root / "chat")
    assert (await _complete(client, "a")).json()["choices"] != sql


async def test_no_roots_means_no_loads(engine: InferenceEngine, root: Path) -> None:
    async with await _client(create_app(_settings(engine, None), engine=engine)) as http:
        response = await _load(http, "sql", root / "sql")
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert "no adapter roots are configured" in message
    assert "FLEXINFER_ENGINE_LORA_ROOTS" in message


async def test_concurrent_requests_use_their_own_adapters(
    client: httpx.AsyncClient, root: Path
) -> None:
    for name in ("sql", "chat"):
        assert (await _load(client, name, root / name)).status_code == 200
    models = [BASE, "sql", "chat"] * 2
    alone = [(await _complete(client, m, seed=i)).json() for i, m in enumerate(models)]
    together = await asyncio.gather(*(_complete(client, m, seed=i) for i, m in enumerate(models)))
    for expected, response in zip(alone, together, strict=True):
        assert response.json()["model"] == expected["model"]
        assert response.json()["choices"] == expected["choices"]
    texts = {r["choices"][0]["text"] for r in alone[:3]}
    assert len(texts) == 3


async def test_adapters_survive_sleep_and_wake(client: httpx.AsyncClient, root: Path) -> None:
    assert (await _load(client, "sql", root / "sql")).status_code == 200
    before = (await _complete(client, "sql")).json()["choices"]
    for level in (1, 2):
        assert (await client.post(f"/sleep?level={level}")).status_code == 200
        assert (await client.post("/wake_up")).status_code == 200
        assert (await _complete(client, "sql")).json()["choices"] == before


async def test_an_unloaded_adapter_finishes_its_running_requests(
    engine: InferenceEngine, root: Path
) -> None:
    app = create_app(_settings(engine, root), engine=engine)
    runner: AsyncRunner = app.state.runner
    adapter = await runner.load_adapter("sql", str(root / "sql"))
    prompt = engine.tokenizer.encode("Once")
    params = SamplingParams(max_tokens=30, seed=4, ignore_eos=True)

    async def text(unload_after_first: bool) -> str:
        generation = await runner.start([prompt], params, adapter)
        pieces = []
        async for event in generation.events():
            if unload_after_first and runner.adapters.get("sql") is not None:
                await runner.unload_adapter("sql")
            pieces.append(event.text if isinstance(event, Delta) else "")
        return "".join(pieces)

    whole = await text(False)
    assert await text(True) == whole
    assert runner.adapters.get("sql") is None


def test_the_settings_read_roots_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FLEXINFER_ENGINE_LORA_ROOTS", f"{tmp_path}/a:{tmp_path}/b")
    monkeypatch.setenv("FLEXINFER_ENGINE_MAX_LORAS", "3")
    settings = EngineSettings()
    assert (settings.lora_roots, settings.max_loras) == ([tmp_path / "a", tmp_path / "b"], 3)
    monkeypatch.setenv("FLEXINFER_ENGINE_LORA_ROOTS", json.dumps([str(tmp_path)]))
    assert EngineSettings().lora_roots == [tmp_path]
    monkeypatch.setenv("FLEXINFER_ENGINE_LORA_ROOTS", "relative/dir")
    with pytest.raises(ValueError, match="must be an absolute path"):
        EngineSettings()


def test_a_served_engine_takes_the_lora_flags(root: Path, tmp_path: Path) -> None:
    """The real process: --lora-root/--max-loras/--max-lora-rank, then the sync SDK."""
    flags = ["--lora-root", str(root), "--max-loras", "1", "--max-lora-rank", "32"]
    model = root.parent / "model"
    with reference_engine(model, tmp_path / "engine.log", name=BASE, args=flags) as engine:
        load = {"lora_name": "big", "lora_path": str(root / "big")}
        response = httpx.post(f"{engine.url}/v1/load_lora_adapter", json=load, timeout=30)
        assert response.status_code == 200, engine.log_tail()
        again = {"lora_name": "sql", "lora_path": str(root / "sql")}
        response = httpx.post(f"{engine.url}/v1/load_lora_adapter", json=again, timeout=30)
        assert response.status_code == 400
        assert "--max-loras 1" in response.json()["error"]["message"]
        with openai.OpenAI(base_url=f"{engine.url}/v1", api_key="unused", max_retries=0) as sdk:
            completion = sdk.completions.create(model="big", prompt="Hi", max_tokens=8, seed=1)
            assert completion.model == "big"
            assert completion.choices[0].text
            assert [m.id for m in sdk.models.list()] == [BASE, "big"]
            chat = sdk.chat.completions.create(
                model="big", messages=[{"role": "user", "content": "Hi!"}], max_tokens=8, seed=5
            )
            assert chat.model == "big"
            assert chat.choices[0].message.content
            with pytest.raises(openai.NotFoundError):
                sdk.chat.completions.create(
                    model="sql", messages=[{"role": "user", "content": "Hi!"}], max_tokens=4
                )
