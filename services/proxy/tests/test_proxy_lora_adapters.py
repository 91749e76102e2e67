"""LoRAAdapter objects: adapterName -> base Model, the adapter name forwarded unchanged."""

from __future__ import annotations

import asyncio
from pathlib import Path

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from flexinfer_common.api import LoRAAdapter, LoRAAdapterPhase, Model
from flexinfer_common.bus import topics
from flexinfer_proxy.core.adapters import serves
from flexinfer_proxy.core.catalog import build_target_index, dangling_adapters
from flexinfer_proxy.testing import make_model
from flexinfer_proxy.testing_stack import ProxyStack, proxy_stack, upstreams, wait_until

MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]


def make_adapter(
    name: str,
    model_ref: str,
    *,
    adapter_name: str | None = None,
    namespace: str = "default",
    phase: str = "Loaded",
) -> LoRAAdapter:
    """A LoRAAdapter on ``model_ref``, served as ``adapter_name`` (default: ``name``), with
    the status the controller writes once it is in ``phase`` (default: loaded everywhere)."""
    return LoRAAdapter.model_validate(
        {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "modelRef": model_ref,
                "adapterName": adapter_name or name,
                "source": {"type": "HuggingFace", "uri": f"org/{name}"},
            },
            "status": {"phase": phase, "message": f"{phase} (test)"},
        }
    )


async def announce(stack: ProxyStack, adapter: LoRAAdapter, *, deleted: bool = False) -> None:
    """Publish the controller's change event for ``adapter``."""
    event = topics.AdapterChangedEvent(
        adapter=adapter.key, model=adapter.model_key, generation=1, deleted=deleted
    )
    await stack.bus.publish(topics.ADAPTERS, event.model_dump(mode="json"))


def adapter_names(stack: ProxyStack) -> list[str]:
    return [a.spec.adapter_name for a in stack.core.catalog.adapters]


async def test_adapter_request_reaches_the_base_model_with_the_adapter_name(
    tmp_path: Path,
) -> None:
    base = make_model("llama", served_name="llama-3-8b")
    async with upstreams(1) as ups, proxy_stack(tmp_path, [base]) as stack:
        ((fake, url),) = ups
        await stack.set_endpoints("default/llama", [url])
        sql = await stack.store.create_adapter(make_adapter("sql", "llama", adapter_name="sql-v1"))
        await announce(stack, sql)
        await wait_until(lambda: "sql-v1" in adapter_names(stack))
        async with stack.openai() as client:
            reply = await client.chat.completions.create(model="sql-v1", messages=MESSAGES)
            assert reply.choices[0].message.content == "hello from u0"
            assert fake.seen[-1].json()["model"] == "sql-v1"
            stream = await client.chat.completions.create(
                model="sql-v1",
                messages=MESSAGES,
                stream=True,
            )
            chunks = [c async for c in stream]
            assert chunks
            assert fake.seen[-1].json()["model"] == "sql-v1"
            # The base model's own name still reaches it under its served name.
            await client.chat.completions.create(model="llama-3-8b", messages=MESSAGES)
            assert fake.seen[-1].json()["model"] == "llama-3-8b"
            assert len(fake.seen) == 3


async def test_unknown_adapter_is_404(tmp_path: Path) -> None:
    async with proxy_stack(tmp_path, [make_model("llama")]) as stack, stack.openai() as client:
        with pytest.raises(openai.NotFoundError) as caught:
            await client.chat.completions.create(model="no-such-lora", messages=MESSAGES)
        error = caught.value.body
        assert isinstance(error, dict)
        assert error["code"] == "model_not_found"
        assert "no-such-lora" in error["message"]


async def test_adapter_whose_base_model_is_missing_is_404_saying_so(tmp_path: Path) -> None:
    async with proxy_stack(tmp_path, [make_model("llama")]) as stack:
        await stack.store.create_adapter(make_adapter("orphan", "ghost"))
        async with stack.openai() as client:
            # The first request misses the cache, re-reads the store, then explains.
            for _ in range(2):
                with pytest.raises(openai.NotFoundError) as caught:
                    await client.chat.completions.create(model="orphan", messages=MESSAGES)
                error = caught.value.body
                assert isinstance(error, dict)
                assert error["code"] == "model_not_found"
                assert error["param"] == "model"
                assert error["message"] == (
                    "The model 'orphan' is a LoRA adapter of Model 'default/ghost', "
                    "which does not exist"
                )


async def test_change_events_add_and_remove_adapters(tmp_path: Path) -> None:
    # A long miss interval: only the events can make the proxy notice the changes.
    models = [make_model("llama")]
    async with (
        upstreams(1) as ups,
        proxy_stack(tmp_path, models, miss_refresh_interval_s=3600) as stack,
        stack.openai() as client,
    ):
        ((fake, url),) = ups
        await stack.set_endpoints("default/llama", [url])
        with pytest.raises(openai.NotFoundError):
            await client.chat.completions.create(model="chat", messages=MESSAGES)
        chat = await stack.store.create_adapter(make_adapter("chat", "llama"))
        await announce(stack, chat)
        await wait_until(lambda: adapter_names(stack) == ["chat"])
        await client.chat.completions.create(model="chat", messages=MESSAGES)
        assert fake.seen[-1].json()["model"] == "chat"
        await stack.store.delete_adapter("default", "chat")
        await announce(stack, chat, deleted=True)
        await wait_until(lambda: adapter_names(stack) == [])
        with pytest.raises(openai.NotFoundError):
            await client.chat.completions.create(model="chat", messages=MESSAGES)


async def test_periodic_resync_picks_up_adapters_without_events(tmp_path: Path) -> None:
    models = [make_model("llama")]
    async with proxy_stack(tmp_path, models, resync_interval_s=0.05) as stack:
        await stack.store.create_adapter(make_adapter("quiet", "llama"))
        await wait_until(lambda: adapter_names(stack) == ["quiet"])
        target = stack.core.catalog.lookup_target("quiet")
        assert target is not None
        assert (target.model.key, target.upstream_name) == ("default/llama", "quiet")


async def test_malformed_adapter_events_are_ignored(tmp_path: Path) -> None:
    models = [make_model("llama")]
    async with proxy_stack(tmp_path, models, miss_refresh_interval_s=3600) as stack:
        await stack.bus.publish(topics.ADAPTERS, {"adapter": 1})
        good = await stack.store.create_adapter(make_adapter("good", "llama"))
        await announce(stack, good)
        await wait_until(lambda: adapter_names(stack) == ["good"])


def test_index_precedence_and_namespaces() -> None:
    llama, coder = make_model("llama"), make_model("coder")
    llama.metadata.annotations["flexinfer.ai/lora-adapters"] = "shared, annotated"
    other_ns = make_model("llama", namespace="ml")
    adapters = [
        make_adapter("b-shared", "coder", adapter_name="shared"),
        make_adapter("a-shared", "llama", adapter_name="shared"),  # first by key wins
        make_adapter("steal", "coder", adapter_name="llama"),  # a served name is never taken
        make_adapter("annotated", "coder"),  # an object wins over the annotation
        make_adapter("orphan", "ghost"),
        make_adapter("elsewhere", "llama", namespace="ml"),  # base is ml/llama, not here
    ]
    models: list[Model] = [llama, coder]
    targets, _ = build_target_index(models, adapters)
    assert (targets["shared"].model.key, targets["shared"].upstream_name) == (
        "default/llama",
        "shared",
    )
    assert targets["llama"].upstream_name == "llama"
    assert targets["llama"].model is llama
    assert targets["annotated"].model is coder
    assert "orphan" not in targets
    assert "elsewhere" not in targets
    assert dangling_adapters(adapters, targets) == {
        "orphan": "default/ghost",
        "elsewhere": "ml/llama",
    }
    targets_ml, _ = build_target_index([other_ns], adapters)
    assert targets_ml["elsewhere"].model is other_ns


async def test_models_list_shows_adapters_with_their_parent(tmp_path: Path) -> None:
    async with proxy_stack(tmp_path, [make_model("llama")]) as stack:
        sql = await stack.store.create_adapter(make_adapter("sql", "llama", adapter_name="sql-v1"))
        await stack.store.create_adapter(make_adapter("orphan", "ghost"))
        await announce(stack, sql)
        await wait_until(lambda: "sql-v1" in adapter_names(stack))
        async with stack.openai() as client:
            listed = {m.id: m for m in (await client.models.list()).data}
        assert set(listed) == {"llama", "sql-v1"}, "an adapter without its base is not listed"
        assert listed["sql-v1"].model_extra == {"parent": "llama"}
        assert listed["llama"].model_extra == {"parent": None}
        async with stack.openai() as client:
            one = await client.models.retrieve("sql-v1")
        assert (one.id, one.model_extra) == ("sql-v1", {"parent": "llama"})


async def test_a_request_for_an_adapter_not_loaded_waits_and_asks_for_it(tmp_path: Path) -> None:
    base = make_model("llama")
    async with upstreams(1) as ups, proxy_stack(tmp_path, [base]) as stack:
        ((fake, url),) = ups
        await stack.set_endpoints("default/llama", [url])
        demands = stack.bus.consumer(topics.DEMAND, "test", "t")
        sql = make_adapter("sql", "llama", adapter_name="sql-v1", phase="Pending")
        sql = await stack.store.create_adapter(sql)
        await announce(stack, sql)
        await wait_until(lambda: "sql-v1" in adapter_names(stack))
        async with stack.openai() as client:
            asked = asyncio.create_task(
                client.chat.completions.create(model="sql-v1", messages=MESSAGES)
            )
            # In the cold-start queue, though the base Model has an endpoint: the adapter is
            # not in its engines yet. The demand names the Model and the adapter.
            await wait_until(lambda: stack.core.queue.depth("default/llama:sql-v1") == 1)
            (message, *_) = await demands.fetch(timeout_s=5)
            assert message.payload["model"] == "default/llama"
            assert message.payload["adapter"] == "sql-v1"
            assert not asked.done()
            loaded = sql.status.model_copy(update={"phase": LoRAAdapterPhase.LOADED})
            sql = await stack.store.update_adapter_status("default", "sql", loaded)
            await announce(stack, sql)
            reply = await asked
        assert reply.choices[0].message.content == "hello from u0"
        assert fake.seen[-1].json()["model"] == "sql-v1"


async def test_an_adapter_that_failed_is_answered_at_once(tmp_path: Path) -> None:
    async with proxy_stack(tmp_path, [make_model("llama")]) as stack:
        bad = make_adapter("bad", "llama", phase="Failed")
        bad.status.message = "replica r0 refused it: LoRA rank 64 is greater than 16"
        await announce(stack, await stack.store.create_adapter(bad))
        await wait_until(lambda: "bad" in adapter_names(stack))
        async with stack.openai() as client:
            with pytest.raises(openai.InternalServerError) as caught:
                await client.chat.completions.create(model="bad", messages=MESSAGES)
        assert caught.value.status_code == 503
        error = caught.value.body
        assert isinstance(error, dict)
        assert error["code"] == "model_unavailable"
        assert "LoRA rank 64" in error["message"]


async def test_an_adapter_being_deleted_is_served_no_more(tmp_path: Path) -> None:
    async with proxy_stack(tmp_path, [make_model("llama")]) as stack:
        held = make_adapter("sql", "llama")
        held.metadata.finalizers = ["flexinfer.ai/lora-cleanup"]
        held = await stack.store.create_adapter(held)
        await announce(stack, held)
        await wait_until(lambda: adapter_names(stack) == ["sql"])
        # The finalizer holds it while the controller unloads it: stamped, still stored.
        await stack.store.delete_adapter("default", "sql")
        await announce(stack, held, deleted=True)
        await wait_until(lambda: adapter_names(stack) == [])
        assert (await stack.store.get_adapter("default", "sql")).metadata.deletion_timestamp


async def test_an_adapter_of_an_external_model_is_forwarded_as_it_is(tmp_path: Path) -> None:
    async with upstreams(1) as ups:
        ((fake, url),) = ups
        external = make_model("ext")
        external.spec.endpoints = [url]
        async with proxy_stack(tmp_path, [external], health_interval_s=3600) as stack:
            # Nothing loads adapters into endpoints the controller does not run: no wait.
            sql = make_adapter("sql", "ext", adapter_name="sql-v1", phase="Pending")
            await announce(stack, await stack.store.create_adapter(sql))
            await wait_until(lambda: "sql-v1" in adapter_names(stack))
            async with stack.openai() as client:
                await client.chat.completions.create(model="sql-v1", messages=MESSAGES)
        assert fake.seen[-1].json()["model"] == "sql-v1"


async def test_an_adapter_goes_only_to_replicas_that_hold_it(tmp_path: Path) -> None:
    base = make_model("llama")
    async with upstreams(2) as ups, proxy_stack(tmp_path, [base]) as stack:
        (holder, u0), (newcomer, u1) = ups
        sql = await stack.store.create_adapter(make_adapter("sql", "llama", adapter_name="sql-v1"))
        await announce(stack, sql)
        await wait_until(lambda: "sql-v1" in adapter_names(stack))
        # A second replica is announced before the controller loaded the adapter into it.
        await stack.set_endpoints("default/llama", [u0, u1], adapters={u0: ["sql-v1"], u1: []})
        async with stack.openai() as client:
            for _ in range(4):
                await client.chat.completions.create(model="sql-v1", messages=MESSAGES)
            assert newcomer.seen == []
            assert [s.json()["model"] for s in holder.seen] == ["sql-v1"] * 4
            # The base model is served by both.
            for _ in range(2):
                await client.chat.completions.create(model="llama", messages=MESSAGES)
            assert [s.json()["model"] for s in newcomer.seen] == ["llama"]


async def test_an_adapter_no_replica_holds_waits_until_one_does(tmp_path: Path) -> None:
    base = make_model("llama")
    async with upstreams(2) as ups, proxy_stack(tmp_path, [base]) as stack:
        (first, u0), (second, u1) = ups
        demands = stack.bus.consumer(topics.DEMAND, "test", "t")
        # Loaded, as the status says, but the replicas now serving have not got it yet
        # (the one that had it left): the request waits, and its demand names the adapter.
        sql = await stack.store.create_adapter(make_adapter("sql", "llama", adapter_name="sql-v1"))
        await announce(stack, sql)
        await wait_until(lambda: "sql-v1" in adapter_names(stack))
        await stack.set_endpoints("default/llama", [u0, u1], adapters={u0: [], u1: []})
        async with stack.openai() as client:
            asked = asyncio.create_task(
                client.chat.completions.create(model="sql-v1", messages=MESSAGES)
            )
            await wait_until(lambda: stack.core.queue.depth("default/llama:sql-v1") == 1)
            (message, *_) = await demands.fetch(timeout_s=5)
            assert (message.payload["model"], message.payload["adapter"]) == (
                "default/llama",
                "sql-v1",
            )
            # A store resync does not make a replica hold what no event said it holds.
            await stack.core.resync()
            assert stack.core.queue.depth("default/llama:sql-v1") == 1  # not released
            assert not stack.core.table.serving("default/llama", serves(sql))
            await stack.set_endpoints("default/llama", [u0, u1], adapters={u0: [], u1: ["sql-v1"]})
            reply = await asked
        assert reply.choices[0].message.content == "hello from u1"
        assert first.seen == []
        assert second.seen[-1].json()["model"] == "sql-v1"


async def test_endpoints_that_do_not_say_serve_an_adapter_once_it_is_loaded(
    tmp_path: Path,
) -> None:
    # A controller that predates EndpointInfo.adapters: the status decides, as before.
    base = make_model("llama")
    async with upstreams(2) as ups, proxy_stack(tmp_path, [base]) as stack:
        urls = [url for _, url in ups]
        await stack.set_endpoints("default/llama", urls)
        sql = await stack.store.create_adapter(make_adapter("sql", "llama", adapter_name="sql-v1"))
        await announce(stack, sql)
        await wait_until(lambda: "sql-v1" in adapter_names(stack))
        async with stack.openai() as client:
            for _ in range(2):
                await client.chat.completions.create(model="sql-v1", messages=MESSAGES)
        assert [len(fake.seen) for fake, _ in ups] == [1, 1]
